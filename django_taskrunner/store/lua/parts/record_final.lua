-- Part (not a script): included by the record scripts (record_write.lua, record_cancel.lua,
-- record_new.lua, record_sid.lua, record_watch.lua) at their include line
-- (store/scripts.py puts it in at load time).
--
-- final: the statuses a record ends with (store/records.py `FINAL_STATUSES`); a final record is
-- never written back to another status. wake_waiters(done, ttl): the push onto a
-- record's done list that wakes `wait()` once it turned final (only for a watched
-- record, 'wt'), kept as long as the record.
local final = {succeeded = true, failed = true, cancelled = true, expired = true}

local function wake_waiters(done, ttl)
  redis.call('RPUSH', done, '1')
  redis.call('EXPIRE', done, ttl)
end
