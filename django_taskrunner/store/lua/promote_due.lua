-- Cluster-safe: yes: the delayed set, the stream and the fair keys in KEYS, and for fair
--   queues the fair lists, whose names it builds from ARGV[3] (tagged {<queue>} like the
--   KEYS): one hash slot
--
-- Move one batch of due messages from a queue's delayed set onto its stream.
--
-- Reading, adding and removing happen in one script, so two schedulers running at
-- once (a lease hand-over) never move a message twice, and a crash never loses one.
-- A batch is small, so Redis serves other clients between two batches.
--
-- KEYS[1] delayed set     <prefix>:{<queue>}:delayed
-- KEYS[2] stream          <prefix>:{<queue>}:stream
-- ARGV[1] now, epoch ms: entries scored at or before it are due
-- ARGV[2] batch size
-- KEYS[3], KEYS[4], ARGV[3] optional (fair queues): the ring, the turns hash and how the
--         fair lists' keys start (<prefix>:{<queue>}:fair[!<p>]:); a due message with a
--         fair key ("fk") then joins the end of its key's list (and the key the ring, as
--         fair_push.lua does) instead of the stream: it waits for its key's turn, and is
--         left out of the reply (it has no stream entry yet)
-- KEYS[5], ARGV[4] optional: the queue's fair mark (<prefix>:{<queue>}:fair-queue[!<p>])
--         and how long it lasts (s): a keyed message renews it; while it is there, a
--         message without a key joins the turn of the tasks without one, the key ''
-- Returns {moved, next, moved entries...}: how many were moved, the due time (ms) of the
-- earliest entry left (-1 when the set is empty), then for each moved message its id,
-- its dispatch token ('' for an older body without one) and its new stream id, so the
-- caller gives each task record its entry (record_sid.lua: the record is in another
-- slot on a cluster). A body that is not a message (no "id") is moved all the same,
-- with id ''.

-- include: moved_entry.lua

local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local reply = {#due, -1}
local unkeyed_turn = KEYS[5] and redis.call('EXISTS', KEYS[5]) == 1
local function join_turn(key, weight, body)
  local list = ARGV[3] .. key
  if redis.call('RPUSH', list, body) == 1 then
    redis.call('RPUSH', KEYS[3], key)
    redis.call('HDEL', KEYS[4], 'u:' .. key)
  end
  redis.call('HSET', KEYS[4], 'w:' .. key, weight)
  if key ~= '' and KEYS[5] then
    redis.call('SET', KEYS[5], '1', 'EX', ARGV[4])
    unkeyed_turn = true
  end
end

for _, body in ipairs(due) do
  local ok, message = pcall(cjson.decode, body)
  if not ok or type(message) ~= 'table' then
    message = {}
  end
  local fk = message['fk']
  if ARGV[3] and type(fk) == 'string' and #fk > 0 then
    join_turn(fk, tonumber(message['fw']) or 1, body)
  elseif unkeyed_turn then
    join_turn('', 1, body)
  else
    local sid = redis.call('XADD', KEYS[2], '*', 'm', body)
    add_moved(reply, message, sid)
  end
end
if #due > 0 then
  redis.call('ZREM', KEYS[1], unpack(due))
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #first > 0 then
  reply[2] = tonumber(first[2])
end
return reply
