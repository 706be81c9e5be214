-- A member of a workflow finished for good: count it once, and when it was the last of
-- its stage, send the next stage's messages in the same step (count and dispatch cannot
-- be separated: a worker dying after this script leaves nothing half done).
--
-- Idempotent per member: the member index joins the done set, and a member counted
-- already (it ran twice after a worker crash, its batch was sent twice) changes nothing.
-- A failed member of a one-task stage (a chain step, a group's callback) ends the
-- workflow "failed" at that stage; a group's stage goes on whatever its members' outcome.
-- A workflow that is no longer running (cancelled, failed) dispatches nothing more.
--
-- KEYS[1] the workflow     <prefix>:workflow:{<id>}
-- KEYS[2] its done set     <prefix>:workflow:{<id>}:done
-- KEYS[3] its members list <prefix>:workflow:{<id>}:members
-- KEYS[4] its bodies list  <prefix>:workflow:{<id>}:bodies
-- KEYS[5 + 2i], KEYS[6 + 2i] the stream and delayed set of the next stage's shard i
-- ARGV[1] member index     ARGV[2] its stage index   ARGV[3] 'succeeded' or 'failed'
-- ARGV[4] the final TTL in seconds, when the workflow holds none
-- ARGV[5] the stream entry's field   ARGV[6 + i] the wake channel of shard i
-- A body list entry is '<shard i>|<delay ms>|<message JSON>'.
-- Returns 'unknown', 'duplicate', 'counted', 'next', or the final status.

if redis.call('EXISTS', KEYS[1]) == 0 then
  return 'unknown'
end
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then
  return 'duplicate'
end
local w = KEYS[1]
local stage = ARGV[2]
if redis.call('TTL', KEYS[2]) < 0 then  -- the first member counted: the set's TTL
  redis.call('EXPIRE', KEYS[2], math.max(1, redis.call('TTL', w)))
end
redis.call('HINCRBY', w, ARGV[3], 1)
redis.call('HINCRBY', w, 'running', -1)
local meta = redis.call('HMGET', w, 'status', 'kind:' .. stage, 'n:' .. stage, 'ttl',
                        'stages', 'failed')
if meta[1] ~= 'running' then
  return meta[1]
end
local function now_ms()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end

local function finish(final)
  local ttl = meta[4] or ARGV[4]
  redis.call('HSET', w, 'status', final, 'finished', now_ms())
  for i = 1, 4 do
    redis.call('EXPIRE', KEYS[i], ttl)
  end
  return final
end

if meta[2] == 'one' and ARGV[3] ~= 'succeeded' then
  redis.call('HSET', w, 'failed_step', stage)
  return finish('failed')
end
if redis.call('HINCRBY', w, 'done:' .. stage, 1) < tonumber(meta[3]) then
  return 'counted'
end
local next_stage = tonumber(stage) + 1
if next_stage >= tonumber(meta[5]) then
  if tonumber(meta[6] or '0') > 0 then
    return finish('finished')
  end
  return finish('succeeded')
end
local next_meta = redis.call('HMGET', w, 'n:' .. next_stage, 'o:' .. next_stage)
local count, offset = tonumber(next_meta[1]), tonumber(next_meta[2])
redis.call('HSET', w, 'stage', next_stage)
redis.call('HINCRBY', w, 'pending', -count)
redis.call('HINCRBY', w, 'running', count)
local woken = {}
local now = now_ms()
for _, entry in ipairs(redis.call('LRANGE', KEYS[4], offset, offset + count - 1)) do
  local bar = string.find(entry, '|', 1, true)
  local shard = tonumber(string.sub(entry, 1, bar - 1))
  local rest = string.sub(entry, bar + 1)
  local bar2 = string.find(rest, '|', 1, true)
  local delay = tonumber(string.sub(rest, 1, bar2 - 1))
  local body = string.sub(rest, bar2 + 1)
  if delay > 0 then
    redis.call('ZADD', KEYS[6 + 2 * shard], now + delay, body)
    if not woken[shard] then
      redis.call('PUBLISH', ARGV[6 + shard], now + delay)
      woken[shard] = true
    end
  else
    redis.call('XADD', KEYS[5 + 2 * shard], '*', ARGV[5], body)
  end
end
return 'next'
