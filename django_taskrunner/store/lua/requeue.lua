-- Cluster-safe: yes: the stream and the delayed set, both tagged {<queue>}, both in KEYS
--
-- Move a message this consumer holds back to its queue, with a new body: onto the
-- stream at once (a retry with no backoff, or a task left unstarted at shutdown), or
-- into the delayed set until `due_ms` (a retry with backoff). Then ack the old entry.
--
-- The move happens only if the entry is still pending for this consumer: when another
-- worker reclaimed it meanwhile, that worker owns it and nothing is moved.
--
-- KEYS[1] stream          <prefix>:{<queue>}:stream
-- KEYS[2] delayed set     <prefix>:{<queue>}:delayed
-- ARGV[1] consumer group
-- ARGV[2] consumer name (the holder)
-- ARGV[3] stream id of the entry being moved
-- ARGV[4] new message body (JSON)
-- ARGV[5] due time in epoch ms; "0" means now (XADD to the stream)
-- ARGV[6] "1" to XDEL the old entry after the ack
-- ARGV[7] wake channel <prefix>:{<queue>}:wake, told when the delayed entry is due
--         before every other, so a sleeping scheduler wakes up for it ("" for none)
-- Returns the new stream id, "delayed", or false when the entry was not ours.

local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #pending == 0 or pending[1][2] ~= ARGV[2] then
  return false
end
local result
if ARGV[5] == '0' then
  result = redis.call('XADD', KEYS[1], '*', 'm', ARGV[4])
else
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  redis.call('ZADD', KEYS[2], ARGV[5], ARGV[4])
  result = 'delayed'
  if ARGV[7] and ARGV[7] ~= '' and (#first == 0 or tonumber(ARGV[5]) < tonumber(first[2])) then
    redis.call('PUBLISH', ARGV[7], ARGV[5])
  end
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
if ARGV[6] == '1' then
  redis.call('XDEL', KEYS[1], ARGV[3])
end
return result
