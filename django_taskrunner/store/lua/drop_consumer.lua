-- Cluster-safe: yes: one key, the queue's stream, in KEYS
--
-- Remove a consumer from the group if it holds nothing: a worker process that ended
-- and whose messages were handed back leaves the dashboard's consumer lists at once,
-- instead of after DEAD_CONSUMER_TIMEOUT. One that still holds entries is kept
-- (XGROUP DELCONSUMER would drop them from the pending list).
--
-- KEYS[1] stream          <prefix>:{<queue>}:stream
-- ARGV[1] consumer group
-- ARGV[2] consumer name
-- Returns 1 when it was removed, 0 when it holds entries or does not exist.

if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local held = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if #held > 0 then
  return 0
end
return redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2]) >= 0 and 1 or 0
