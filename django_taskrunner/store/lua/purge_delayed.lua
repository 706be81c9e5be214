-- Cluster-safe: yes: the delayed set and the keys its items free, the keys of one queue
--   (or shard), all tagged {<queue>}, all in KEYS
--
-- Purge one batch of a queue's delayed set: remove each member still there, and free the
-- unique lock, its mode record and the task_id it holds, only where they still hold this
-- message's value. One step, so the scheduler never promotes a purged member.
--
-- KEYS[1]   the delayed set <prefix>:{<queue>}:delayed
-- KEYS[2..] the keys the items free, in item order (each of the same queue)
-- ARGV[1]   n, the number of items; then per item:
--           the member (the message body), k, then k holder values ('' as in
--           purge_stream.lua: a mode record following its lock)
-- Returns how many members were removed.

-- include: free_keys.lua

local removed = 0
local arg = 2
local key = 2
for _ = 1, tonumber(ARGV[1]) do
  local member = ARGV[arg]
  local count = tonumber(ARGV[arg + 1])
  arg = arg + 2
  local gone = redis.call('ZREM', KEYS[1], member) == 1
  if gone then removed = removed + 1 end
  arg, key = free_keys(gone, count, arg, key)
end
return removed
