-- Cluster-safe: yes: one key, the queue's stream, in KEYS
--
-- Hand entries a dead consumer held to a live one, keeping their place: the supervisor
-- of `runtasks --processes` gives a dead child's messages to a sibling, which runs them
-- next (instead of after everything queued behind them).
--
-- Each entry moves only if it is still pending for the dead consumer: one another
-- worker reclaimed meanwhile stays with that worker. Its delivery counter is kept, or
-- set: the counter of a message the dead child was running is raised, so that the
-- sibling counts that run as one that died (see worker/steps.py).
--
-- KEYS[1] stream          <prefix>:{<queue>}:stream
-- ARGV[1] consumer group
-- ARGV[2] consumer name that held them (dead)
-- ARGV[3] consumer name that takes them (alive)
-- ARGV[4...] pairs: stream id, delivery counter to set ("" to keep it)
-- Returns the ids that moved.

local moved = {}
for i = 4, #ARGV, 2 do
  local id = ARGV[i]
  local pending = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1)
  if #pending > 0 and pending[1][2] == ARGV[2] then
    if ARGV[i + 1] == '' then
      redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, id, 'JUSTID')
    else
      redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, id, 'RETRYCOUNT', ARGV[i + 1],
                 'JUSTID')
    end
    moved[#moved + 1] = id
  end
end
return moved
