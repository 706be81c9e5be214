-- Cluster-safe: yes: one key, the slots, in KEYS
--
-- Heartbeat of a running attempt's concurrency slot: push its lease's expiry on.
--
-- A lease that expired meanwhile (the worker stalled past its reservation timeout) is
-- not taken back: its place may be someone else's now.
--
-- KEYS[1] the slots  <prefix>:{<queue>}:limit:concurrency:<task>[:<key>]
-- ARGV[1] holder (task id)
-- ARGV[2] lease in ms
-- Returns 1 when renewed, 0 when the slot is gone.

-- include: now_ms.lua

local now = now_ms()
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expiry or tonumber(expiry) <= now then
  return 0
end
local lease = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], 'XX', now + lease, ARGV[1])
if redis.call('PTTL', KEYS[1]) < lease + 1000 then
  redis.call('PEXPIRE', KEYS[1], lease + 1000)
end
return 1
