-- Cluster-safe: yes: the log and its waiting set, both tagged {<queue>}, both in KEYS
--
-- Rate limit: admit one start if the sliding window allows it, else say how long to wait.
--
-- The log holds one member per start, scored by its time (the server's clock, so every
-- host agrees). A start is admitted only while fewer than `limit` starts lie in the last
-- `window` ms, so no window of that length ever holds more than `limit` starts.
-- A refused task is told when its turn comes: waiters queue up in the waiting set, the
-- j-th waiter gets the (j mod limit)-th oldest start + (1 + j div limit) windows, so a
-- crowd of waiters does not wake at once to find one free place.
--
-- KEYS[1] the log          <prefix>:{<queue>}:limit:rate:<task>[:<key>]
-- KEYS[2] its waiting set  <prefix>:{<queue>}:limit-waiting:rate:<task>[:<key>]
-- ARGV[1] limit (starts per window)
-- ARGV[2] window in ms
-- ARGV[3] task id (the waiter's member)
-- ARGV[4] ms a waiter's entry is kept past its due time (for the admin's count)
-- Returns {0, now ms} when admitted, or {wait ms, now ms}.

-- include: waiting_line.lua

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local grace = tonumber(ARGV[4])
-- A start exactly one window ago still counts: two starts are admitted only more than
-- `window` ms apart.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - window))
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. (now - grace))
local used = redis.call('ZCARD', KEYS[1])
local before = redis.call('ZSCORE', KEYS[2], ARGV[3])
if used < limit then
  redis.call('ZADD', KEYS[1], now, ARGV[3] .. ':' .. t[1] .. '.' .. t[2])
  redis.call('PEXPIRE', KEYS[1], window + 1000)
  if before then
    redis.call('ZREM', KEYS[2], ARGV[3])
  end
  return {0, now}
end
local ahead = ahead_of(before)
local index = ahead % limit
local rounds = math.floor(ahead / limit)
local oldest = redis.call('ZRANGE', KEYS[1], index, index, 'WITHSCORES')
local free = tonumber(oldest[2]) + window * (1 + rounds) + 1
return wait_in_line(ARGV[3], now, math.max(1, free - now), grace)
