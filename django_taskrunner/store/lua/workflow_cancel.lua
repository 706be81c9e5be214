-- Cluster-safe: yes: the workflow's hash, done set, members and bodies, all tagged
--   {<id>}, all in KEYS
--
-- cancel_workflow(): a running workflow becomes 'cancelled' and dispatches no more
-- stages (workflow_member.lua reads its status); one finished, or unknown, is left.
--
-- KEYS[1] the workflow <prefix>:workflow:{<id>}
-- KEYS[2..4] its done set, members list, bodies list
-- ARGV[1] now, epoch ms   ARGV[2] the final TTL in seconds, when the workflow holds none
-- Returns {'unknown'}, {'final', status}, or {'ok', current stage}.

if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'unknown'}
end
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'running' then
  return {'final', status}
end
local ttl = redis.call('HGET', KEYS[1], 'ttl') or ARGV[2]
redis.call('HSET', KEYS[1], 'status', 'cancelled', 'finished', ARGV[1])
for i = 1, 4 do
  redis.call('EXPIRE', KEYS[i], ttl)
end
return {'ok', redis.call('HGET', KEYS[1], 'stage')}
