-- Cluster-safe: no: a stream (tagged {<queue>}) and a record (tagged {<id>}) in one
--   call; a single server only, on a cluster the store sends XADD, then record_new.lua
--
-- Add messages to their streams and write each one's new task record in the same step,
-- with the stream id the XADD gave it ('sid'), so that a lookup by task id alone (the
-- admin's task page from a lock's holder id) reads the entry at once instead of
-- searching the stream. One call carries a whole batch (`dispatch_many`): the script's
-- own cost is paid once, not per message. A single server only: on a cluster the record
-- lives in the id's slot, not the queue's, and follows the XADD in the next round trip,
-- with its stream id (record_new.lua).
--
-- KEYS[2k-1], KEYS[2k]   message k's stream <prefix>:{<queue>}:stream, its record
--                        <prefix>:record:{<id>}
-- ARGV[1]                the entry's field name
-- ARGV[2]                the distinct records as one JSON array (one argument, not a
--                        dozen per message: the client's cost is per argument), each
--                        [the TTL in seconds, [field, value, ...]], every value a JSON
--                        string; a batch of one task's messages most often has one
-- ARGV[3]                which of them each message gets: '' (the first, for every
--                        message) or a JSON array, message k's 1-based position in ARGV[2]
-- ARGV[3 + k]            message k's body
-- Returns the stream ids, in order.
--
-- Each distinct record is decoded once and its table shared by the messages that get it
-- (`write_new_record` leaves it as it is): decoding one copy per message cost the server
-- more than the XADD and HSET together.

-- include: new_record.lua

local records = cjson.decode(ARGV[2])
local which = ARGV[3] ~= '' and cjson.decode(ARGV[3]) or nil
local ids = {}
for k = 1, #KEYS / 2 do
  local spec = records[which and which[k] or 1]
  local id = redis.call('XADD', KEYS[2 * k - 1], '*', ARGV[1], ARGV[3 + k])
  write_new_record(KEYS[2 * k], id, spec[1], unpack(spec[2]))
  ids[k] = id
end
return ids
