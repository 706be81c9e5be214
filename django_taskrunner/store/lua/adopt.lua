-- Hand entries a dead consumer held to a live one, keeping their place and their
-- delivery counter: the supervisor of `runtasks --processes` gives a dead child's
-- fetched-but-not-started messages to a sibling, which runs them next (instead of
-- after everything queued behind them).
--
-- Each entry moves only if it is still pending for the dead consumer: one another
-- worker reclaimed meanwhile stays with that worker.
--
-- KEYS[1] stream          <prefix>:{<queue>}:stream
-- ARGV[1] consumer group
-- ARGV[2] consumer name that held them (dead)
-- ARGV[3] consumer name that takes them (alive)
-- ARGV[4...] stream ids
-- Returns the ids that moved.

local moved = {}
for i = 4, #ARGV do
  local id = ARGV[i]
  local pending = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1)
  if #pending > 0 and pending[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, id, 'JUSTID')
    moved[#moved + 1] = id
  end
end
return moved
