-- Cluster-safe: no: a stream (tagged {<queue>}) and a record (tagged {<id>}) in one
--   call; a single server only, on a cluster the store sends XADD, then record_new.lua
--
-- `record_add.lua` for one message (a `dispatch()` whose message carries its id: an
-- expiry, a reservation timeout, a trace; a plain one is an XADD alone): the same XADD
-- and new record with its stream id ('sid'), the record's fields given as plain
-- arguments rather than a JSON batch, which spares the client encoding them and the
-- script decoding them.
--
-- KEYS[1] the stream <prefix>:{<queue>}:stream, KEYS[2] the record <prefix>:record:{<id>}
-- ARGV[1] the entry's field name, ARGV[2] the body, ARGV[3] the record's TTL in seconds
-- ARGV[4...] the record's field, value pairs
-- Returns the stream id.

-- include: new_record.lua

local id = redis.call('XADD', KEYS[1], '*', ARGV[1], ARGV[2])
write_new_record(KEYS[2], id, ARGV[3], unpack(ARGV, 4))
return id
