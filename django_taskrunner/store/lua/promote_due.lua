-- Move one batch of due messages from a queue's delayed set onto its stream.
--
-- Reading, adding and removing happen in one script, so two schedulers running at
-- once (a lease hand-over) never move a message twice, and a crash never loses one.
-- A batch is small, so Redis serves other clients between two batches.
--
-- KEYS[1] delayed set     <prefix>:{<queue>}:delayed
-- KEYS[2] stream          <prefix>:{<queue>}:stream
-- ARGV[1] now, epoch ms: entries scored at or before it are due
-- ARGV[2] batch size
-- Returns {moved, next}: how many were moved, and the due time (ms) of the earliest
-- entry left, or -1 when the set is empty.

local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, body in ipairs(due) do
  redis.call('XADD', KEYS[2], '*', 'm', body)
end
if #due > 0 then
  redis.call('ZREM', KEYS[1], unpack(due))
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #first == 0 then
  return {#due, -1}
end
return {#due, tonumber(first[2])}
