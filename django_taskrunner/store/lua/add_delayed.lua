-- Cluster-safe: yes: one key, the queue's delayed set, in KEYS (the wake channel is no
--   key)
--
-- Add a message to a queue's delayed set. When it is due before every entry already
-- waiting, PUBLISH its due time so a scheduler sleeping until a later time wakes up for
-- it (one round trip: the ZADD and the wake-up cannot be separated). An entry due at or
-- after the earliest one needs no wake-up: the scheduler already wakes for that one,
-- and many tasks due at one instant publish once, not once each.
--
-- KEYS[1] delayed set     <prefix>:{<queue>}:delayed
-- ARGV[1] due time in epoch ms (the score)
-- ARGV[2] message body (JSON; unique, since it holds the message id and attempt)
-- ARGV[3] wake channel    <prefix>:{<queue>}:wake
-- Returns 1 when the scheduler was told, 0 when an entry due no later was waiting.

local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
if #first == 0 or tonumber(ARGV[1]) < tonumber(first[2]) then
  redis.call('PUBLISH', ARGV[3], ARGV[1])
  return 1
end
return 0
