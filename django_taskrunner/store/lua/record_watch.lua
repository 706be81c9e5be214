-- Cluster-safe: yes: one key, the record, in KEYS
--
-- wait(): read one task's record and, unless it is final, mark it watched, so that the
-- write that makes it final also pushes onto its done list (record_write.lua). Both in
-- one step: no final write can fall between the read and the mark.
--
-- KEYS[1] the record <prefix>:record:{<id>}
-- Returns the record's fields and values (HGETALL), empty when there is none.

-- include: record_final.lua

if redis.call('EXISTS', KEYS[1]) == 0 then
  return {}
end
local status = redis.call('HGET', KEYS[1], 's')
if not final[status] then
  redis.call('HSET', KEYS[1], 'wt', '1')
end
return redis.call('HGETALL', KEYS[1])
