-- Part (not a script): included by record_add.lua, record_add_one.lua, record_new.lua and
-- enqueue.lua at their include line (store/scripts.py puts it in at load time).
--
-- write_new_record(record, fields, sid, ttl): a dispatch's new task record, whole: its
-- field, value pairs `fields`, the stream id its message was added as ('sid'; none when
-- `sid` is '': a message in the delayed set has no entry yet), and its TTL in seconds.
local function write_new_record(record, fields, sid, ttl)
  if sid ~= '' then
    fields[#fields + 1] = 'sid'
    fields[#fields + 1] = sid
  end
  redis.call('HSET', record, unpack(fields))
  redis.call('EXPIRE', record, ttl)
end
