-- Part (not a script): included by record_add.lua, record_add_one.lua, record_new.lua and
-- enqueue.lua at their include line (store/scripts.py puts it in at load time).
--
-- write_new_record(record, fields, sid, ttl): a dispatch's new task record, whole: its
-- field, value pairs `fields`, the stream id its message was added as ('sid'; none when
-- `sid` is '': a message in the delayed set has no entry yet), and its TTL in seconds.
-- `fields` is left as it is: one table may serve several records (record_add.lua).
local function write_new_record(record, fields, sid, ttl)
  if sid ~= '' then
    redis.call('HSET', record, 'sid', sid, unpack(fields))
  else
    redis.call('HSET', record, unpack(fields))
  end
  redis.call('EXPIRE', record, ttl)
end
