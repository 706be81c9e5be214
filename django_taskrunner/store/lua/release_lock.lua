-- Cluster-safe: yes: the locks and task id keys of one message's queue, tagged
--   {<queue>}, all in KEYS
--
-- Free (or refresh) the unique lock and task_id reservation a message holds, but only
-- where that dispatch of the message is still the holder: a lock that expired and was
-- then taken by a newer task, or a task_id dispatched again after the first dispatch
-- finished, carries the newer dispatch's value, and is left alone.
--
-- KEYS[i]   a unique lock or task_id key of one queue
-- ARGV[1]   the holder: '<message id>#<dispatch token>', or the message id alone for a
--           message queued by an earlier version (the value the enqueue script wrote)
-- ARGV[i+1] what to do with KEYS[i]: '0' deletes it (compare-and-delete); 'follow'
--           deletes it only if this call just deleted KEYS[i-1] (a lock's mode record
--           goes with its lock, and stays with a newer holder's lock); any other value
--           is a TTL in ms to set on it (compare-and-expire: keep holding it)
-- Returns one entry per key: 1 done; 0 the key no longer exists (expired or freed), or
-- a 'follow' key left alone; otherwise the value found, i.e. the holder now.

local results = {}
for i, key in ipairs(KEYS) do
  local action = ARGV[i + 1]
  if action == 'follow' then
    if i > 1 and ARGV[i] == '0' and results[i - 1] == 1 then
      results[i] = redis.call('DEL', key)
    else
      results[i] = 0
    end
  else
    local value = redis.call('GET', key)
    if not value then
      results[i] = 0
    elseif value ~= ARGV[1] then
      results[i] = value
    elseif action == '0' then
      redis.call('DEL', key)
      results[i] = 1
    else
      redis.call('PEXPIRE', key, action)
      results[i] = 1
    end
  end
end
return results
