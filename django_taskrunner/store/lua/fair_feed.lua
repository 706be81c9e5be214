-- Cluster-safe: yes: the ring, the turns hash and the stream in KEYS, and the fair lists,
--   whose names it builds from ARGV[2] (tagged {<queue>} like the KEYS): one hash slot
--
-- Move up to N waiting fair tasks onto their stream, in turns across keys: the ring's
-- head key gives its oldest task, and once it has used its weight's turns in a row (or
-- its list is empty) it goes to the ring's end (or leaves it). Pop, XADD and the turn
-- bookkeeping are one step, so no turn is lost or taken twice and no task is moved twice
-- or lost: once on the stream the task follows the consumer group's path (pending entry,
-- reclaim after a crash, ack). The list keys are built here from ARGV[2] and a ring
-- member; they share the queue's hash tag, so the script stays in one Cluster slot.
--
-- KEYS[1] the ring           <prefix>:{<queue>}:fair-ring[!<p>]
-- KEYS[2] the turns hash     <prefix>:{<queue>}:fair-turns[!<p>]
-- KEYS[3] the stream         <prefix>:{<queue>}:stream[!<p>]
-- ARGV[1] how many to move at most
-- ARGV[2] how the lists' keys start  <prefix>:{<queue>}:fair[!<p>]:
-- ARGV[3] the stream entry's field name
-- Returns {moved, -1, then id, token and stream id of each}: the shape of
-- promote_due.lua's reply, so the caller gives the records their entries.

-- include: moved_entry.lua

local reply = {0, -1}
local limit = tonumber(ARGV[1])
local moved = 0
while moved < limit do
  local key = redis.call('LINDEX', KEYS[1], 0)
  if not key then
    break
  end
  local list = ARGV[2] .. key
  local body = redis.call('LPOP', list)
  if body then
    moved = moved + 1
    local sid = redis.call('XADD', KEYS[3], '*', ARGV[3], body)
    local ok, message = pcall(cjson.decode, body)
    add_moved(reply, ok and message, sid)
  end
  if redis.call('LLEN', list) == 0 then  -- served all it had: leaves the ring
    redis.call('LPOP', KEYS[1])
    redis.call('HDEL', KEYS[2], 'u:' .. key, 'w:' .. key)
  else
    local used = redis.call('HINCRBY', KEYS[2], 'u:' .. key, 1)
    local weight = tonumber(redis.call('HGET', KEYS[2], 'w:' .. key)) or 1
    if used >= weight then  -- its turns are used: the next key's turn
      redis.call('LPOP', KEYS[1])
      redis.call('RPUSH', KEYS[1], key)
      redis.call('HDEL', KEYS[2], 'u:' .. key)
    end
  end
end
reply[1] = moved
return reply
