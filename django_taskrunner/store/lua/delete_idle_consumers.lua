-- Cluster-safe: yes: one key, the queue's stream, in KEYS
--
-- Remove the group's consumers that hold nothing and have been idle for long: workers
-- that are gone. Checking and deleting in one script matters: XGROUP DELCONSUMER drops
-- the consumer's pending entries, so a consumer that read something meanwhile must stay.
--
-- KEYS[1] stream          <prefix>:{<queue>}:stream
-- ARGV[1] consumer group
-- ARGV[2] idle time in ms above which an empty consumer is removed
-- ARGV[3] consumer name to keep (the caller's own)
-- Returns the names of the removed consumers.

local removed = {}
local min_idle = tonumber(ARGV[2])
for _, fields in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local info = {}
  for i = 1, #fields, 2 do
    info[fields[i]] = fields[i + 1]
  end
  if info['pending'] == 0 and info['idle'] >= min_idle and info['name'] ~= ARGV[3] then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], info['name'])
    removed[#removed + 1] = info['name']
  end
end
return removed
