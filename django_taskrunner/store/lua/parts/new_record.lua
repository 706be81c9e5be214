-- Part (not a script): included by record_add.lua, record_add_one.lua, record_new.lua and
-- enqueue.lua at their include line (store/scripts.py puts it in at load time).
--
-- write_new_record(record, sid, ttl, ...): a dispatch's new task record, whole: the
-- stream id its message was added as ('sid'; none when `sid` is '': a message in the
-- delayed set has no entry yet), its TTL in seconds, and its field, value pairs as the
-- remaining arguments (a caller passes `unpack(ARGV, n)` or `unpack(t)`: no table is
-- built to hold them, a microsecond of a dispatch's script).
local function write_new_record(record, sid, ttl, ...)
  if sid ~= '' then
    redis.call('HSET', record, 'sid', sid, ...)
  else
    redis.call('HSET', record, ...)
  end
  redis.call('EXPIRE', record, ttl)
end
