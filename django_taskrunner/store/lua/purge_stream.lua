-- Cluster-safe: yes: the stream and the keys its entries free, the keys of one queue (or
--   shard), all tagged {<queue>}, all in KEYS
--
-- Purge one batch of a queue's waiting messages: delete each entry that still waits (its
-- id is after the consumer group's last-delivered id: no worker has it), and free the
-- unique lock, its mode record and the task_id it holds, only where they still hold this
-- message's value. An entry a worker read meanwhile is running: it is kept, and so are
-- its keys. All in one step, so a worker never reads a purged entry whose lock is freed.
--
-- KEYS[1]   the stream <prefix>:{<queue>}:stream
-- KEYS[2..] the keys the items free, in item order (each of the same queue)
-- ARGV[1]   the consumer group
-- ARGV[2]   n, the number of items; then per item:
--           its stream id, k (how many keys it frees), then k holder values: the value
--           the key must hold to be deleted; '' deletes the key only if the key before
--           it was deleted by this call (a lock's mode record)
-- Returns how many entries were deleted.

-- include: free_keys.lua
-- include: delivered.lua

-- No group yet: nothing was delivered, every entry waits.
local last = last_delivered(KEYS[1], ARGV[1])
local function waiting(id)
  return last == nil or not at_or_before(id, last)
end

local deleted = 0
local arg = 3
local key = 2
for _ = 1, tonumber(ARGV[2]) do
  local id = ARGV[arg]
  local count = tonumber(ARGV[arg + 1])
  arg = arg + 2
  local gone = waiting(id) and redis.call('XDEL', KEYS[1], id) == 1
  if gone then deleted = deleted + 1 end
  arg, key = free_keys(gone, count, arg, key)
end
return deleted
