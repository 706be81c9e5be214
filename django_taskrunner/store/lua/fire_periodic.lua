-- Cluster-safe: yes: the periodic hash and the stream (or delayed set), both tagged
--   {<queue>}, both in KEYS
--
-- Fire one occurrence of a periodic schedule: add its message to the stream unless this
-- occurrence (or a later one) was already fired. The check and the add are one step, so
-- two leaders during a hand-over fire each occurrence once.
--
-- KEYS[1] periodic hash   <prefix>:{<queue>}:periodic  (schedule id -> last occurrence ms)
-- KEYS[2] stream          <prefix>:{<queue>}:stream, or with ARGV[4] the delayed set
--                         <prefix>:{<queue>}:delayed
-- ARGV[1] schedule id
-- ARGV[2] occurrence, epoch ms
-- ARGV[3] message body (JSON)
-- ARGV[4] optional, a fair task's: the wake channel <prefix>:{<queue>}:wake; the message
--         goes to the delayed set, due at once, whose promotion puts it in its fair key's
--         turn (promote_due.lua), and the scheduler is woken for it
-- Returns 1 when fired, 0 when this occurrence was fired already.

local last = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '-1')
if last >= tonumber(ARGV[2]) then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if ARGV[4] then
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
  redis.call('PUBLISH', ARGV[4], ARGV[2])
else
  redis.call('XADD', KEYS[2], '*', 'm', ARGV[3])
end
return 1
