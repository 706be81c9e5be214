-- Cluster-safe: yes without a record: the keys of one queue (or shard), all tagged
--   {<queue>}, all in KEYS; the record's keys (another slot, `Records.enqueue_args`) are
--   added on a single server only
--
-- Add one message and, in the same atomic step, take its unique lock and/or reserve
-- its task_id. On contention nothing at all is written and the holder is returned.
--
-- Every check runs before the first write, and the only write that can fail (XADD or
-- ZADD on a key of the wrong type) comes first. Redis does not roll back a script that
-- errors half way, so this order is what guarantees "never a lock without its
-- message": when the add fails, no lock or reservation has been written yet.
--
-- KEYS[1] destination: the stream <prefix>:{<queue>}:stream, or the delayed set
--         <prefix>:{<queue>}:delayed
-- KEYS[2] the lock <prefix>:{<queue>}:unique:<task>[:<key>] when ARGV[4] ~= '',
--         otherwise the task_id key
-- then    the lock's mode record <prefix>:{<queue>}:unique-mode:<task>[:<key>] when
--         ARGV[9] is given (after the lock)
-- last    the task_id key <prefix>:{<queue>}:id:<task_id> when ARGV[6] ~= ''
-- ARGV[1] 'stream' (XADD now) or 'delayed' (ZADD at score ARGV[3])
-- ARGV[2] the message body (JSON)
-- ARGV[3] due time in epoch ms, the score in the delayed set; ignored for 'stream'
-- ARGV[4] lock value: the holder, '<message id>#<dispatch token>' (locks.holder_value);
--         '' when the dispatch takes no lock
-- ARGV[5] lock TTL in ms (unique_for)
-- ARGV[6] task_id value (the holder, as ARGV[4]); '' when the dispatch names no task_id
-- ARGV[7] task_id reservation TTL in ms
-- ARGV[8] wake channel <prefix>:{<queue>}:wake, for 'delayed': when the new entry is due
--         before every waiting one, its due time is PUBLISHed there (as add_delayed.lua)
-- ARGV[9] optional: the lock's unique mode, written to the mode record with the lock's
--         TTL so the admin can show it (the lock's value stays the holder)
-- ARGV[10] optional: the conflict policy, what a lock found held means: '' or 'raise'
--         (return the holder), 'return' (the holder and its body), 'replace' (a holder
--         not started yet takes this payload), 'debounce' (a holder still waiting in the
--         delayed set takes this payload and this due time; one that left it no longer
--         holds the lock). For the last three, the queue's other structure (the delayed
--         set when KEYS[1] is the stream, else the stream) comes after the task_id key.
--         A replace also needs the holder alike: the same mode, and a task_id exactly
--         when this dispatch has one; otherwise the lock counts as held, as for 'raise'.
-- ARGV[11] the consumer group: a stream entry it has been delivered to has started
-- ARGV[12], ARGV[13] the body split around its id and dispatch token: the holder's
--         body is ARGV[12] .. <holder id as JSON> .. ',"tok":"<holder token>",' ..
--         ARGV[13] (core/message.py, `holder_parts`)
-- ARGV[14] optional: the TTL in seconds of the task's record, '' for none; then
--         ARGV[15...] its field, value pairs (the stream id is added as 'sid'); the
--         record's two keys (record, done list)
--         come last in KEYS. A single server only: on a cluster the record lives in the
--         id's slot, not the queue's, and is written after this script (store/records.py).
--
-- The mode record holds '<mode>\n<policy>\n<where>\n<ref>': where the holder waits, 's'
-- and its stream id, or 'd' and its body (the delayed set's member), kept up to date by
-- a replace (older records hold the mode alone).
-- Returns {'ok', <stream id> | 'delayed'}; {'id', <holder>} when the task_id is
-- reserved; {'lock', <holder>} when the lock is held (the value found, token included),
-- with policy 'return' {'lock', <holder>, <holder's body> | false};
-- {'replaced', <holder>, <stream id> | 'delayed'} when the holder took this payload.

-- include: new_record.lua
-- include: delivered.lua

local lock_key, mode_key, id_key
local mode = ARGV[9] or ''
local n = 2
if ARGV[4] ~= '' then
  lock_key = KEYS[n]
  n = n + 1
  if mode ~= '' then
    mode_key = KEYS[n]
    n = n + 1
  end
end
if ARGV[6] ~= '' then
  id_key = KEYS[n]
  n = n + 1
end
local policy = ARGV[10] or ''
local stream_key, delayed_key = KEYS[1], nil
if ARGV[1] == 'delayed' then
  stream_key, delayed_key = nil, KEYS[1]
end
if policy == 'return' or policy == 'replace' or policy == 'debounce' then
  if ARGV[1] == 'delayed' then
    stream_key = KEYS[n]
  else
    delayed_key = KEYS[n]
  end
  n = n + 1
end
local record_ttl = ARGV[14] or ''

-- The holder's place, from its mode record: where ('s' | 'd'), ref; nil for none.
local function holder_place()
  if not mode_key then
    return nil
  end
  local value = redis.call('GET', mode_key)
  if not value then
    return nil
  end
  local m, p, where, ref = string.match(value, '^([^\n]*)\n([^\n]*)\n([sd])\n(.*)$')
  if not where then
    return nil
  end
  return where, ref, m .. '\n' .. p .. '\n', m
end

-- The body of stream entry `id`, or nil when it is gone.
local function stream_body(id)
  local entry = redis.call('XRANGE', stream_key, id, id)
  if #entry == 0 then
    return nil
  end
  local fields = entry[1][2]
  for i = 1, #fields, 2 do
    if fields[i] == 'm' then
      return fields[i + 1]
    end
  end
  return nil
end

-- A replacing body must mean what the holder's did: the same mode, and a task_id
-- exactly when the holder has one (the worker frees what the body names). The bodies
-- tell, not ARGV[6]: an outbox move reserves a mark there for a body without a task_id.
local function compatible(old_body, old_mode)
  if old_mode ~= mode then
    return false
  end
  local ok, old = pcall(cjson.decode, old_body)
  local ok_new, new = pcall(cjson.decode, ARGV[2])
  if not ok or type(old) ~= 'table' or not ok_new or type(new) ~= 'table' then
    return false
  end
  return (old['tid'] == true) == (new['tid'] == true)
end

-- The holder's body rebuilt around the new payload: same id, same dispatch token.
local function holder_body(holder)
  local id, token = string.match(holder, '^(.*)#(%w+)$')
  if not id then
    id, token = holder, nil
  end
  local tok = ''
  if token then
    tok = '"tok":"' .. token .. '",'
  end
  return ARGV[12] .. cjson.encode(id) .. ',' .. tok .. ARGV[13]
end

-- On a held lock: what the policy makes of it; nil means 'take the lock over' (debounce).
local function on_held(holder)
  if policy == '' or policy == 'raise' then
    return {'lock', holder}
  end
  local where, ref, head, held_mode = holder_place()
  if policy == 'return' then
    local body = false
    if where == 'd' then
      body = ref
    elseif where == 's' then
      body = stream_body(ref) or false
    end
    return {'lock', holder, body}
  end
  if where == 'd' then
    local score = redis.call('ZSCORE', delayed_key, ref)
    if not score then
      if policy == 'debounce' then
        return nil  -- it left the delayed set: its quiet period is over
      end
      return {'lock', holder}
    end
    if not compatible(ref, held_mode) then
      return {'lock', holder}
    end
    local body = holder_body(holder)
    if policy == 'debounce' then
      score = ARGV[3]
      redis.call('PEXPIRE', lock_key, ARGV[5])
    end
    redis.call('ZREM', delayed_key, ref)
    redis.call('ZADD', delayed_key, score, body)
    redis.call('SET', mode_key, head .. 'd\n' .. body, 'KEEPTTL')
    if policy == 'debounce' then
      redis.call('PEXPIRE', mode_key, ARGV[5])
    end
    return {'replaced', holder, 'delayed'}
  end
  if policy == 'debounce' then
    return nil  -- on the stream (or an older lock): the quiet period is over
  end
  local old_body = where == 's' and stream_body(ref)
  if not old_body or delivered(stream_key, ARGV[11], ref)
      or not compatible(old_body, held_mode) then
    return {'lock', holder}  -- started (or not findable, or not alike): as 'raise'
  end
  local body = holder_body(holder)
  redis.call('XDEL', stream_key, ref)
  local added = redis.call('XADD', stream_key, '*', 'm', body)
  redis.call('SET', mode_key, head .. 's\n' .. added, 'KEEPTTL')
  return {'replaced', holder, added}
end

if id_key then
  local holder = redis.call('GET', id_key)
  if holder then
    return {'id', holder}
  end
end
if lock_key then
  local holder = redis.call('GET', lock_key)
  if holder then
    local reply = on_held(holder)
    if reply then
      return reply
    end
  end
end

local added
if ARGV[1] == 'delayed' then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[2])
  if ARGV[8] ~= '' and (#first == 0 or tonumber(ARGV[3]) < tonumber(first[2])) then
    redis.call('PUBLISH', ARGV[8], ARGV[3])
  end
  added = 'delayed'
else
  added = redis.call('XADD', KEYS[1], '*', 'm', ARGV[2])
end
if lock_key then
  redis.call('SET', lock_key, ARGV[4], 'PX', ARGV[5])
  if mode_key then
    local place = 's\n' .. added
    if added == 'delayed' then
      place = 'd\n' .. ARGV[2]
    end
    if policy == '' then
      policy = 'raise'
    end
    redis.call('SET', mode_key, mode .. '\n' .. policy .. '\n' .. place, 'PX', ARGV[5])
  end
end
if id_key then
  redis.call('SET', id_key, ARGV[6], 'PX', ARGV[7])
end
if record_ttl ~= '' then
  redis.call('DEL', KEYS[n], KEYS[n + 1])
  local sid = added  -- its stream id: a lookup by id reads the entry at once
  if added == 'delayed' then
    sid = ''
  end
  write_new_record(KEYS[n], sid, record_ttl, unpack(ARGV, 15))
end
return {'ok', added}
