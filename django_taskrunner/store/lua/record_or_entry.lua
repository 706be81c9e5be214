-- Cluster-safe: no: a record (tagged {<id>}) and a stream (tagged {<queue>}) in one call;
--   a single server only, where plain dispatches name their task by their entry
--
-- The record of a task whose id names its stream entry (a plain dispatch's,
-- `entries.entry_task_id`), or, while no worker has written that record yet, the entry
-- itself: in one call, so a worker writing the record and acking the entry in between
-- cannot make the task look unknown. The entry counts while it waits or is held by a
-- worker (pending); one the group acked (kept with DELETE_ON_ACK off) does not: its
-- record was written before its ack, so it expired or was never kept.
--
-- KEYS[1] the record <prefix>:record:{<id>}, KEYS[2] the stream <prefix>:{<queue>}:stream
-- ARGV[1] the entry's stream id, ARGV[2] the consumer group
-- Returns {1, field, value, ...} for the record, {2, body} for a waiting or held entry,
-- {0} for neither.

-- include: delivered.lua

local fields = redis.call('HGETALL', KEYS[1])
if #fields > 0 then
  table.insert(fields, 1, 1)
  return fields
end
local rows = redis.call('XRANGE', KEYS[2], ARGV[1], ARGV[1])
if #rows == 0 then
  return {0}
end
local body = false
local entry = rows[1][2]
for i = 1, #entry, 2 do
  if entry[i] == 'm' then
    body = entry[i + 1]
  end
end
if not body then
  return {0}
end

if delivered(KEYS[2], ARGV[2], ARGV[1])
    and #redis.call('XPENDING', KEYS[2], ARGV[2], ARGV[1], ARGV[1], 1) == 0 then
  return {0}  -- acked (DELETE_ON_ACK off keeps it): its record was written first
end
return {2, body}  -- waiting, or held by a worker
