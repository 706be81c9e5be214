-- Cluster-safe: yes: the record and its done list, both tagged {<id>}, both in KEYS
--
-- Write a dispatch's task record after its message was added, with the stream id the add
-- gave it ('sid'): on Redis Cluster, where the record lives in the id's slot, not the
-- queue's, so it cannot share a script with the XADD (or `enqueue.lua`) and follows in
-- the next round trip. The task page, opened by id alone, then reads that one entry
-- instead of searching the stream. One record per call (each is in a slot of its own).
--
-- A worker may have fetched the message and written the record first ('running', or a
-- final status): then only the fields it lacks are added, so the record never goes back
-- to 'queued', and its TTL and done list are left as the worker set them (a final
-- record's stream id is not added: its entry is gone). A record of an earlier dispatch
-- of the same task_id (another holder 'h', or none where this dispatch has one) is
-- replaced, its done list too; one without a status yet (a worker's progress alone) gets
-- every field.
--
-- KEYS[1] the record <prefix>:record:{<id>}, KEYS[2] its done list <prefix>:record:{<id>}:done
-- ARGV[1] the record's TTL in seconds
-- ARGV[2] the entry's stream id ('' for a message in the delayed set: none yet)
-- ARGV[3...] field, value pairs ('s' the status, 'h' the dispatch's holder, if any)
-- Returns 1 when the record was written whole, 0 when a worker's record was completed.

-- include: record_final.lua
-- include: new_record.lua

local sid = ARGV[2]
local ours = ''
for i = 3, #ARGV, 2 do
  if ARGV[i] == 'h' then
    ours = ARGV[i + 1]
  end
end
local now = redis.call('HMGET', KEYS[1], 's', 'h')
local status, holder = now[1], now[2]
local stale = holder and ours ~= '' and holder ~= ours
if stale or (status and ours ~= '' and not holder) then
  redis.call('DEL', KEYS[1], KEYS[2])
  status = nil
end
if not status then
  write_new_record(KEYS[1], sid, ARGV[1], unpack(ARGV, 3))
  return 1
end
for i = 3, #ARGV, 2 do
  redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1])
end
if sid ~= '' and not final[status] then
  redis.call('HSETNX', KEYS[1], 'sid', sid)
end
return 0
