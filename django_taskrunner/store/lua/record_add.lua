-- Add one message to its stream and write its new task record in the same step, with
-- the stream id the XADD gave it ('sid'), so that a lookup by task id alone (the admin's
-- task page from a lock's holder id) reads the entry at once instead of searching the
-- stream. A single server only: on a cluster the record lives in the id's slot, not the
-- queue's, and is written beside the XADD without its stream id (store/records.py).
--
-- KEYS[1] the stream    <prefix>:{<queue>}:stream
-- KEYS[2] the record    <prefix>:record:{<id>}
-- ARGV[1] the entry's field name, ARGV[2] the message body
-- ARGV[3] the record's TTL in seconds
-- ARGV[4...] the record's field, value pairs
-- Returns the stream id.

local id = redis.call('XADD', KEYS[1], '*', ARGV[1], ARGV[2])
local fields = {}
for i = 4, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
fields[#fields + 1] = 'sid'
fields[#fields + 1] = id
redis.call('HSET', KEYS[2], unpack(fields))
redis.call('EXPIRE', KEYS[2], ARGV[3])
return id
