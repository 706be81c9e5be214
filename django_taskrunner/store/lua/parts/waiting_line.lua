-- Part (not a script): included by rate_acquire.lua and concurrency_acquire.lua at their
-- include line (store/scripts.py puts it in at load time).
--
-- A refused start waits in line in its limit's waiting set (KEYS[2]), scored by when it
-- is told to try again. ahead_of(before): how many waiters are ahead of a member whose
-- score was `before` (nil: a newcomer, behind all of them). wait_in_line(member, now,
-- wait, grace): (re)score the member at `now + wait` and keep the set at least `wait +
-- grace` ms, for the admin's count. Returns {wait, now}, the script's reply.
local function ahead_of(before)
  if before then
    return redis.call('ZCOUNT', KEYS[2], '-inf', '(' .. before)
  end
  return redis.call('ZCARD', KEYS[2])
end

local function wait_in_line(member, now, wait, grace)
  redis.call('ZADD', KEYS[2], now + wait, member)
  local keep = wait + grace
  if redis.call('PTTL', KEYS[2]) < keep then
    redis.call('PEXPIRE', KEYS[2], keep)
  end
  return {wait, now}
end
