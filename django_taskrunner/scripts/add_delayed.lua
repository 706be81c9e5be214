-- Add a message to a queue's delayed set. When it is now the earliest entry, PUBLISH
-- its due time so a scheduler sleeping until a later time wakes up for it (one round
-- trip: the ZADD and the wake-up cannot be separated).
--
-- KEYS[1] delayed set     <prefix>:{<queue>}:delayed
-- ARGV[1] due time in epoch ms (the score)
-- ARGV[2] message body (JSON; unique, since it holds the message id and attempt)
-- ARGV[3] wake channel    <prefix>:{<queue>}:wake
-- Returns 1 when the scheduler was told, 0 when an earlier entry was already waiting.

redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if tonumber(first[2]) >= tonumber(ARGV[1]) then
  redis.call('PUBLISH', ARGV[3], ARGV[1])
  return 1
end
return 0
