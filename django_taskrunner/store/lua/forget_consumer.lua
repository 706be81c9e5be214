-- Cluster-safe: yes: one key, the queue's stream, in KEYS
--
-- A worker that stops cleanly leaves its consumer group: its consumer is removed when it
-- holds nothing, so a stopped worker is not listed as "no heartbeat" until a sweep. One
-- script: XGROUP DELCONSUMER drops the consumer's pending entries, so one that still
-- holds any (not acked, handed back for reclaim) stays.
--
-- KEYS[1] stream          <prefix>:{<queue>}:stream
-- ARGV[1] consumer group
-- ARGV[2] consumer name
-- Returns 1 when removed, 0 when it holds entries or is not in the group.

for _, fields in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local info = {}
  for i = 1, #fields, 2 do
    info[fields[i]] = fields[i + 1]
  end
  if info['name'] == ARGV[2] then
    if info['pending'] == 0 then
      redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
      return 1
    end
    return 0
  end
end
return 0
