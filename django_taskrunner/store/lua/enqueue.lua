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
-- ARGV[10] optional: the TTL in seconds of the task's record, '' for none; then
--         ARGV[11...] its field, value pairs (the stream id is added as 'sid'); the
--         record's two keys (record, done list)
--         come last in KEYS. A single server only: on a cluster the record lives in the
--         id's slot, not the queue's, and is written after this script (store/records.py).
-- Returns {'ok', <stream id> | 'delayed'}; {'id', <holder>} when the task_id is
-- reserved; {'lock', <holder>} when the lock is held (the value found, token included).

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
local record_ttl = ARGV[10] or ''

if id_key then
  local holder = redis.call('GET', id_key)
  if holder then
    return {'id', holder}
  end
end
if lock_key then
  local holder = redis.call('GET', lock_key)
  if holder then
    return {'lock', holder}
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
    redis.call('SET', mode_key, mode, 'PX', ARGV[5])
  end
end
if id_key then
  redis.call('SET', id_key, ARGV[6], 'PX', ARGV[7])
end
if record_ttl ~= '' then
  redis.call('DEL', KEYS[n], KEYS[n + 1])
  local fields = {unpack(ARGV, 11)}
  if added ~= 'delayed' then  -- its stream id: a lookup by id reads the entry at once
    fields[#fields + 1] = 'sid'
    fields[#fields + 1] = added
  end
  redis.call('HSET', KEYS[n], unpack(fields))
  redis.call('EXPIRE', KEYS[n], record_ttl)
end
return {'ok', added}
