-- Give a task's record the stream id of the entry its message was just added as ('sid'),
-- after a move the dispatch did not see: a delayed message promoted by the scheduler, a
-- retry or a put-back requeued onto the stream, a delayed entry run now. The task page
-- then reads that one entry instead of searching the stream. One record per call, so a
-- pipeline of these works on a cluster, where the record is in another slot than the
-- stream.
--
-- Nothing is written when there is no record (its task keeps none, or it expired: no
-- record is created without its TTL), when the record is final (the task already ran),
-- or when the record belongs to a later dispatch of the same task_id ('h', its holder).
-- A "delayed" record turns "queued": its message is on the stream now.
--
-- KEYS[1] the record   <prefix>:record:{<id>}
-- ARGV[1] the stream id
-- ARGV[2] the message's holder value ('<id>#<token>', or its id; '' when unknown)
-- Returns 1 when written, 0 when not.

local now = redis.call('HMGET', KEYS[1], 's', 'h')
local status, holder = now[1], now[2]
if not status then
  return 0
end
local final = {succeeded = true, failed = true, cancelled = true, expired = true}
if final[status] or (holder and ARGV[2] ~= '' and holder ~= ARGV[2]) then
  return 0
end
if status == 'delayed' then
  redis.call('HSET', KEYS[1], 'sid', ARGV[1], 's', 'queued')
else
  redis.call('HSET', KEYS[1], 'sid', ARGV[1])
end
return 1
