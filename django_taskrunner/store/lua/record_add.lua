-- Add messages to their streams and write each one's new task record in the same step,
-- with the stream id the XADD gave it ('sid'), so that a lookup by task id alone (the
-- admin's task page from a lock's holder id) reads the entry at once instead of
-- searching the stream. One call carries a whole batch (`dispatch_many`): the script's
-- own cost is paid once, not per message. A single server only: on a cluster the record
-- lives in the id's slot, not the queue's, and is written beside the XADD without its
-- stream id (store/records.py).
--
-- KEYS[2k-1], KEYS[2k]   message k's stream <prefix>:{<queue>}:stream, its record
--                        <prefix>:record:{<id>}
-- ARGV[1]                the entry's field name
-- then, for each message: its body, the record's TTL in seconds, the number of
-- field-value pairs n, and the n pairs
-- Returns the stream ids, in order.

local ids = {}
local at = 2
for k = 1, #KEYS / 2 do
  local stream, record = KEYS[2 * k - 1], KEYS[2 * k]
  local id = redis.call('XADD', stream, '*', ARGV[1], ARGV[at])
  local ttl, pairs = ARGV[at + 1], tonumber(ARGV[at + 2])
  local fields = {}
  for i = at + 3, at + 2 + 2 * pairs do
    fields[#fields + 1] = ARGV[i]
  end
  fields[#fields + 1] = 'sid'
  fields[#fields + 1] = id
  redis.call('HSET', record, unpack(fields))
  redis.call('EXPIRE', record, ttl)
  ids[k] = id
  at = at + 3 + 2 * pairs
end
return ids
