-- Cluster-safe: yes without the next stage's streams, as the store calls it on a cluster
--   (the workflow's keys are tagged {<id>}); with them (KEYS[5...], tagged {<queue>}) a
--   single server only
--
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
-- A body list entry is '<shard i>|<delay ms>|<message JSON>'. A message with a fair key
-- ("fk") goes to the delayed set, due now, as a delayed one does: its promotion puts it
-- in its key's turn (promote_due.lua), never straight onto the stream.
-- Returns 'unknown', 'duplicate', 'counted', 'next', the final status, or 'corrupt: <why>'.
--
-- Before its first write it checks what it will read: each key's type, the stage's
-- numbers and, when this member completes its stage, the next stage's numbers and body
-- entries. A workflow whose keys do not hold what they should (written by hand, by
-- another release) is ended 'failed' with an 'error' field saying why (when its hash is
-- a hash), and nothing else is written: the script never stops half way, and a corrupt
-- workflow stops only itself, never the batch of finished tasks it is sent with.

local w = KEYS[1]
local stage = ARGV[2]

-- include: now_ms.lua

-- The workflow's keys hold the wrong thing: end it 'failed' (if its hash is one and it
-- still runs), saying why.
local function corrupt(why, hash_ok)
  if hash_ok and redis.call('HGET', w, 'status') == 'running' then
    redis.call('HSET', w, 'status', 'failed', 'error', why, 'finished', now_ms())
    local ttl = tonumber(redis.call('HGET', w, 'ttl')) or tonumber(ARGV[4])
    for i = 1, 4 do
      if redis.call('EXISTS', KEYS[i]) == 1 then
        redis.call('EXPIRE', KEYS[i], ttl)
      end
    end
  end
  return 'corrupt: ' .. why
end

local expected = {'hash', 'set', 'list', 'list'}
for i = 1, 4 do
  local kind = redis.call('TYPE', KEYS[i])['ok']
  if i == 1 and kind == 'none' then
    return 'unknown'
  end
  if kind ~= 'none' and kind ~= expected[i] then
    return corrupt(KEYS[i] .. ' holds a ' .. kind .. ', not a ' .. expected[i], i > 1)
  end
end

local meta = redis.call('HMGET', w, 'status', 'kind:' .. stage, 'n:' .. stage, 'ttl',
                        'stages', 'failed', 'done:' .. stage, ARGV[3], 'running', 'pending')
local size, stages = tonumber(meta[3]), tonumber(meta[5])
-- The counters this script adds to: HINCRBY fails on anything but an integer.
local counters = {[7] = 'done:' .. stage, [8] = ARGV[3], [9] = 'running', [10] = 'pending'}
for i = 7, 10 do
  if meta[i] and not string.match(meta[i], '^-?%d+$') then
    return corrupt('field ' .. counters[i] .. ' is not an integer', true)
  end
end

-- One body entry, '<shard i>|<delay ms>|<message JSON>': shard, delay, body (nil: bad).
local function parse(entry)
  local bar = string.find(entry, '|', 1, true)
  if not bar then
    return nil
  end
  local rest = string.sub(entry, bar + 1)
  local bar2 = string.find(rest, '|', 1, true)
  if not bar2 then
    return nil
  end
  local shard = tonumber(string.sub(entry, 1, bar - 1))
  local delay = tonumber(string.sub(rest, 1, bar2 - 1))
  if not shard or not delay or shard < 0 or shard % 1 ~= 0 or 6 + 2 * shard > #KEYS then
    return nil
  end
  return shard, delay, string.sub(rest, bar2 + 1)
end

-- The next stage, when this member would complete its own: its size, offset and
-- entries, checked before anything is written (nil and why: corrupt).
local next_stage, count, offset, entries
if meta[1] == 'running' then
  if not size or not stages or not tonumber(stage) then
    return corrupt('stage ' .. stage .. ' has no number of members or stages', true)
  end
  next_stage = tonumber(stage) + 1
  local completes = (tonumber(meta[7]) or 0) + 1 >= size
  local ends = meta[2] == 'one' and ARGV[3] ~= 'succeeded'  -- a failed step: no next
  if completes and next_stage < stages and not ends then
    local next_meta = redis.call('HMGET', w, 'n:' .. next_stage, 'o:' .. next_stage)
    count, offset = tonumber(next_meta[1]), tonumber(next_meta[2])
    if not count or not offset then
      return corrupt('stage ' .. next_stage .. ' has no number of members or offset', true)
    end
    entries = redis.call('LRANGE', KEYS[4], offset, offset + count - 1)
    if #entries ~= count then
      return corrupt('stage ' .. next_stage .. ' has ' .. #entries .. ' bodies, not ' .. count,
                     true)
    end
    for position, entry in ipairs(entries) do
      if not parse(entry) then
        return corrupt('body ' .. (offset + position - 1) .. ' is not <shard>|<delay>|<message>',
                       true)
      end
    end
  end
end

if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then
  return 'duplicate'
end
if redis.call('TTL', KEYS[2]) < 0 then  -- the first member counted: the set's TTL
  redis.call('EXPIRE', KEYS[2], math.max(1, redis.call('TTL', w)))
end
redis.call('HINCRBY', w, ARGV[3], 1)
redis.call('HINCRBY', w, 'running', -1)
if meta[1] ~= 'running' then
  return meta[1]
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
if redis.call('HINCRBY', w, 'done:' .. stage, 1) < size then
  return 'counted'
end
if next_stage >= stages then
  if tonumber(meta[6] or '0') > 0 then
    return finish('finished')
  end
  return finish('succeeded')
end
if not entries then  -- counted meanwhile past what was read above: cannot happen in a script
  return corrupt('stage ' .. stage .. ' completed out of turn', true)
end
redis.call('HSET', w, 'stage', next_stage)
redis.call('HINCRBY', w, 'pending', -count)
redis.call('HINCRBY', w, 'running', count)
local function keyed(body)  -- a fair key: it waits for its key's turn
  if not string.find(body, '"fk"', 1, true) then
    return false
  end
  local ok, message = pcall(cjson.decode, body)
  return ok and type(message) == 'table' and type(message['fk']) == 'string'
    and #message['fk'] > 0
end
local woken = {}
local now = now_ms()
for _, entry in ipairs(entries) do
  local shard, delay, body = parse(entry)
  if delay > 0 or keyed(body) then
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
