-- Cluster-safe: yes: the key's list, the ring and the turns hash, all tagged {<queue>},
--   all in KEYS
--
-- Put messages of one fair key in its list (docs/flow-control.md, "Fair queues"), and
-- the key in its queue's ring of keys with waiting tasks when it was not there: a key is
-- in the ring exactly while its list holds something (fair_feed.lua keeps that too).
-- A real key also marks the queue fair for ARGV[3] seconds more; the key '' is the turn
-- of the queue's tasks without a key, which marks nothing. Every key shares the queue's
-- hash tag: one slot.
--
-- KEYS[1] the key's list     <prefix>:{<queue>}:fair[!<p>]:<key>
-- KEYS[2] the ring           <prefix>:{<queue>}:fair-ring[!<p>]
-- KEYS[3] the turns hash     <prefix>:{<queue>}:fair-turns[!<p>]
-- KEYS[4] the queue's mark   <prefix>:{<queue>}:fair-queue[!<p>]
-- ARGV[1] the fair key ('' for the tasks without one)
-- ARGV[2] its weight (turns in a row, >= 1)
-- ARGV[3] how long the mark lasts, in seconds
-- ARGV[4...] the message bodies, oldest first
-- Returns the list's length.

local length = 0
for i = 4, #ARGV do
  length = redis.call('RPUSH', KEYS[1], ARGV[i])
end
if length == #ARGV - 3 then  -- the list was empty: the key joins the ring, at its end
  redis.call('RPUSH', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], 'u:' .. ARGV[1])
end
redis.call('HSET', KEYS[3], 'w:' .. ARGV[1], ARGV[2])
if ARGV[1] ~= '' then
  redis.call('SET', KEYS[4], '1', 'EX', ARGV[3])
end
return length
