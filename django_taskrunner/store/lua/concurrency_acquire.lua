-- Cluster-safe: yes: the slots and their waiting set, both tagged {<queue>}, both in
--   KEYS
--
-- Concurrency limit: take one of `limit` slots for a running attempt, or say how long
-- to wait before trying again.
--
-- A slot is a lease: holder (the task id) -> expiry (server ms), renewed by the
-- worker's heartbeat (concurrency_renew.lua) and removed when the attempt ends. Expired
-- leases (a worker that died) are dropped first, so a dead worker's slot frees within
-- its reservation timeout. A holder that already has a slot (its message reclaimed from
-- a dead worker, started again) keeps it.
--
-- KEYS[1] the slots        <prefix>:{<queue>}:limit:concurrency:<task>[:<key>]
-- KEYS[2] its waiting set  <prefix>:{<queue>}:limit-waiting:concurrency:<task>[:<key>]
-- ARGV[1] limit
-- ARGV[2] holder (task id)
-- ARGV[3] lease in ms (the attempt's reservation timeout)
-- ARGV[4] base wait in ms of a refused one; it grows with the waiters ahead of it
-- ARGV[5] longest wait in ms
-- ARGV[6] ms a waiter's entry is kept past its due time (for the admin's count)
-- Returns {0, now ms} when the slot is taken, or {wait ms, now ms}.

-- include: waiting_line.lua
-- include: now_ms.lua

local now = now_ms()
local limit = tonumber(ARGV[1])
local lease = tonumber(ARGV[3])
local grace = tonumber(ARGV[6])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. (now - grace))
local before = redis.call('ZSCORE', KEYS[2], ARGV[2])
if redis.call('ZSCORE', KEYS[1], ARGV[2]) or redis.call('ZCARD', KEYS[1]) < limit then
  redis.call('ZADD', KEYS[1], now + lease, ARGV[2])
  if redis.call('PTTL', KEYS[1]) < lease + 1000 then
    redis.call('PEXPIRE', KEYS[1], lease + 1000)
  end
  if before then
    redis.call('ZREM', KEYS[2], ARGV[2])
  end
  return {0, now}
end
local ahead = ahead_of(before)
local wait = math.min(tonumber(ARGV[5]), tonumber(ARGV[4]) * (1 + math.floor(ahead / limit)))
return wait_in_line(ARGV[2], now, wait, grace)
