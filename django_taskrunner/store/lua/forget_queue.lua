-- Cluster-safe: yes: one key, the seen set, in KEYS
--
-- Forget one known queue, unless it was seen again since the caller read its score.
--
-- KEYS[1] the seen set  <prefix>:queues:seen
-- ARGV[1] the queue
-- ARGV[2] the cut-off, epoch ms: forgotten only when last seen before it
-- Returns 1 when forgotten, 0 when kept. (The caller then drops it from the used set,
-- another key: on a cluster another slot.)

local seen = redis.call('ZSCORE', KEYS[1], ARGV[1])
if seen and tonumber(seen) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
