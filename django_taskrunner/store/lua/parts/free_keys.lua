-- Part (not a script): included by purge_stream.lua and purge_delayed.lua at their
-- include line (store/scripts.py puts it in at load time).
--
-- free_keys(gone, count, arg, key): free the `count` keys of one purged item, KEYS[key]
-- on, against the holder values ARGV[arg] on, only when the item is `gone` (this call
-- removed it): a holder value deletes its key only while the key holds it; '' deletes
-- the key only if the key before it was deleted by this call (a lock's mode record).
-- Returns the next item's `arg` and `key`.
local function free_keys(gone, count, arg, key)
  local freed = false
  for _ = 1, count do
    local holder = ARGV[arg]
    if gone then
      if holder == '' then
        if freed then redis.call('DEL', KEYS[key]) end
      else
        freed = redis.call('GET', KEYS[key]) == holder
        if freed then redis.call('DEL', KEYS[key]) end
      end
    end
    arg = arg + 1
    key = key + 1
  end
  return arg, key
end
