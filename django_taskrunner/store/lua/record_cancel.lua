-- Cluster-safe: yes: the record and its done list, both tagged {<id>}, both in KEYS
--
-- cancel(): flag one task's record as cancelled, unless it is finished (or unknown).
--
-- A task not running yet (delayed, queued, retrying) is cancelled here and now: status
-- 'cancelled', finished at ARGV[1], the record's final TTL, the waiters woken. A running
-- one keeps its status with the flag set: its worker reads the flag with its next
-- heartbeat, tells the task (ctx.cancelled), and writes 'cancelled' when it ends.
--
-- KEYS[1] the record    <prefix>:record:{<id>}
-- KEYS[2] its done list <prefix>:record:{<id>}:done
-- ARGV[1] now, epoch ms
-- ARGV[2] the final TTL in seconds when the record holds none ('ttl' field)
-- ARGV[3] '1' for cancel(id, terminate=True): a running task cancelled already is
--         answered 'ok' again, so its worker hears the terminate
-- Returns {'unknown'}, {'final', status}, or {'ok', status before, shard, lock key,
-- holder, task-id flag, stream id} ('' for what the record does not hold).

-- include: record_final.lua

if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'unknown'}
end
local status = redis.call('HGET', KEYS[1], 's') or ''
if final[status] then
  return {'final', status}
end
if redis.call('HGET', KEYS[1], 'c') == '1' and not (ARGV[3] == '1' and status == 'running') then
  return {'final', status}
end
redis.call('HSET', KEYS[1], 'c', '1')
if status ~= 'running' then
  local ttl = redis.call('HGET', KEYS[1], 'ttl') or ARGV[2]
  redis.call('HSET', KEYS[1], 's', 'cancelled', 'f', ARGV[1])
  redis.call('EXPIRE', KEYS[1], ttl)
  if redis.call('HEXISTS', KEYS[1], 'wt') == 1 then
    wake_waiters(KEYS[2], ttl)
  end
end
local fields = redis.call('HMGET', KEYS[1], 'sh', 'q', 'lk', 'h', 'ik', 'sid')
return {'ok', status, fields[1] or fields[2] or '', fields[3] or '', fields[4] or '',
        fields[5] or '', fields[6] or ''}
