-- Cluster-safe: yes: one key, the queue's stream, in KEYS
--
-- Heartbeat: reset the idle time of the entries this consumer still holds, so no other
-- worker reclaims them. An entry another consumer has reclaimed meanwhile is left alone
-- (a plain XCLAIM would steal it back) and reported as lost.
--
-- With a run count, the entries' delivery counter is also set to it: a worker does this
-- when it starts a reclaimed message, so the counter says how often it was started.
--
-- KEYS[1] stream          <prefix>:{<queue>}:stream
-- ARGV[1] consumer group
-- ARGV[2] consumer name (the holder)
-- ARGV[3] delivery counter to set, or "" to leave it
-- ARGV[4...] stream ids
-- Returns the ids that are no longer held by this consumer.

local lost = {}
for i = 4, #ARGV do
  local id = ARGV[i]
  local pending = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1)
  if #pending == 0 or pending[1][2] ~= ARGV[2] then
    lost[#lost + 1] = id
  elseif ARGV[3] == '' then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, id, 'JUSTID')
  else
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, id, 'RETRYCOUNT', ARGV[3], 'JUSTID')
  end
end
return lost
