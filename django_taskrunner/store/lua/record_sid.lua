-- Cluster-safe: yes with one record per call, as the store calls it on a cluster (a
--   record is tagged {<id>}); a batch of records spans slots, a single server only
--
-- Give a task's record the stream id of the entry its message was just added as ('sid'),
-- after a move the dispatch did not see: a delayed message promoted by the scheduler, a
-- retry or a put-back requeued onto the stream, a delayed entry run now. The task page
-- then reads that one entry instead of searching the stream. A batch's records in one
-- call on a single server; one record per call on a cluster, where each record is in a
-- slot of its own (a pipeline of calls).
--
-- Nothing is written when there is no record (its task keeps none, or it expired: no
-- record is created without its TTL), when the record is final (the task already ran),
-- or when the record belongs to a later dispatch of the same task_id ('h', its holder).
-- A "delayed" record turns "queued": its message is on the stream now.
--
-- KEYS[i] the records  <prefix>:record:{<id>}: all of a batch in one call on a single
--         server, one per call on a cluster (each record is in its own slot)
-- ARGV[2i - 1] the stream id of record i, ARGV[2i] its message's holder value
--         ('<id>#<token>', or its id; '' when unknown)
-- Returns how many records were written.

-- include: record_final.lua

local written = 0
for i, key in ipairs(KEYS) do
  local sid, expected = ARGV[2 * i - 1], ARGV[2 * i]
  local now = redis.call('HMGET', key, 's', 'h')
  local status, holder = now[1], now[2]
  if status and not final[status] and not (holder and expected ~= '' and holder ~= expected) then
    if status == 'delayed' then
      redis.call('HSET', key, 'sid', sid, 's', 'queued')
    else
      redis.call('HSET', key, 'sid', sid)
    end
    written = written + 1
  end
end
return written
