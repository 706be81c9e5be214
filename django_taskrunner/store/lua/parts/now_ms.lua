-- Part (not a script): included by concurrency_acquire.lua, concurrency_renew.lua,
-- record_write.lua and workflow_member.lua at their include line (store/scripts.py puts
-- it in at load time). rate_acquire.lua reads TIME itself: it also needs the seconds and
-- microseconds apart (a start's member).
--
-- now_ms(): the server's time (TIME) in epoch milliseconds, so hosts with skewed clocks
-- agree on it.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
