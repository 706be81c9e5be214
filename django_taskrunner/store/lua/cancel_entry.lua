-- Cluster-safe: yes: the shard's stream, cancelled set and the message's lock keys, all
--   tagged {<shard>}, all in KEYS
--
-- cancel(), the part in the slot of the task's shard (after record_cancel.lua flagged the
-- record): decide who frees the task's unique lock and task id, and tell the workers.
--
-- A message not delivered yet (its entry after the group's last-delivered id, in no
-- consumer's pending list) is deleted here, and what it holds is freed in the same
-- step: no worker can read it any more. A message some consumer fetched (XPENDING over
-- its entry id finds it) keeps its lock: that worker frees it when it skips or ends the
-- task (or the worker that reclaims it after a crash), so no new dispatch of the same
-- unique task can run beside it. Without a known entry (no 'sid' in the record: a
-- cluster, a delayed task the scheduler moved, a retry not started yet), the lock is
-- freed here (unless `free` is '0': the task runs) and the worker skips the message by
-- the cancelled set.
--
-- KEYS[1] the shard's stream        <prefix>:{<shard>}:stream
-- KEYS[2] the shard's cancelled set <prefix>:{<shard>}:cancelled
-- KEYS[3...] the lock, its mode record, the task id key (as release_lock.lua)
-- ARGV[1] the consumer group
-- ARGV[2] the entry's stream id, or ''
-- ARGV[3] the holder value (cancelled-set member and what the keys must hold)
-- ARGV[4] the cancelled set's TTL in seconds
-- ARGV[5] '1': the task is not running (its lock may be freed here); '0': it runs
-- ARGV[6] the pub/sub channel of cancels; ARGV[7] the notice published on it after the
--         holding consumer's name and a newline ('' when no consumer is known)
-- ARGV[8...] one action per lock key: '0' delete, 'follow' (release_lock.lua)
-- Returns {'removed'} (deleted and freed), {'held', consumer, idle ms} (pending: the
-- worker frees; idle: since its holder last beat for it), or {'marked', freed 0|1} (no
-- entry known: skipped by the cancelled set).

-- include: delivered.lua

local function free()
  local done = {}
  for i = 3, #KEYS do
    local action = ARGV[i + 5]
    if action == 'follow' then
      if done[i - 1] then redis.call('DEL', KEYS[i]) end
    elseif redis.call('GET', KEYS[i]) == ARGV[3] then
      redis.call('DEL', KEYS[i])
      done[i] = true
    end
  end
end

local sid = ARGV[2]
if sid ~= '' and redis.call('EXISTS', KEYS[1]) == 1 then
  local ok, rows = pcall(redis.call, 'XPENDING', KEYS[1], ARGV[1], sid, sid, 1)
  if ok and rows[1] then
    redis.call('SADD', KEYS[2], ARGV[3])
    redis.call('EXPIRE', KEYS[2], ARGV[4])
    local consumer = rows[1][2]
    redis.call('PUBLISH', ARGV[6], consumer .. '\n' .. ARGV[7])
    return {'held', consumer, rows[1][3]}
  end
  -- Not delivered (no group yet: nothing was), and an id the stream can hold (a corrupt
  -- record's 'sid' is left to the cancelled set).
  if string.match(sid, '^%d+%-%d+$') and not delivered(KEYS[1], ARGV[1], sid)
      and #redis.call('XRANGE', KEYS[1], sid, sid) == 1 then
    redis.call('XDEL', KEYS[1], sid)
    free()
    return {'removed'}
  end
end
redis.call('SADD', KEYS[2], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[4])
if ARGV[5] == '1' then free() end
redis.call('PUBLISH', ARGV[6], '\n' .. ARGV[7])
return {'marked', ARGV[5]}
