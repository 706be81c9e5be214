-- Write fields of task records, as the worker learns them, with each record's TTL. One
-- call carries a whole batch (the acker's finished tasks, the heartbeat's started ones):
-- the script's own cost is paid once, not per task. On a cluster, where the records of
-- one batch live in different slots, each call carries one record.
--
-- 'update' (started, progress, a retry coming): nothing is written once the record is
-- final (a client cancelled it while it was queued): a cancelled task stays cancelled.
-- 'final' (succeeded, failed, expired, cancelled): a record whose cancel flag is set
-- ends 'cancelled' whatever the outcome; then the waiters (if any) are woken.
--
-- KEYS[2k-1] record k        <prefix>:record:{<id>}
-- KEYS[2k]   its done list   <prefix>:record:{<id>}:done
-- ARGV, for each record: 'update' or 'final', the TTL in seconds, the number of
-- field-value pairs n, then the n pairs (field 's' is the status, 'h' the dispatch's
-- holder)
-- Returns the status now recorded, per record (false: none).

local final = {succeeded = true, failed = true, cancelled = true, expired = true}

-- One record: its mode and TTL, its pairs from ARGV[first] to ARGV[last].
local function write(record, done, mode, ttl, first, last)
  -- What the record holds now, in one call: status, attempt, holder, cancel flag, watched.
  local now = redis.call('HMGET', record, 's', 'a', 'h', 'c', 'wt')
  local status, attempt, holder = now[1], now[2], now[3]
  local cancelled, watched = now[4] == '1', now[5]
  if status and final[status] and (mode == 'update' or status == 'cancelled') then
    return status
  end
  -- A late beat of an attempt must not overwrite a later attempt's record ('a' field),
  -- nor any write of one dispatch a later dispatch of the same task_id ('h', its holder).
  for i = first, last, 2 do
    if mode == 'update' and ARGV[i] == 'a' and attempt
        and tonumber(attempt) > tonumber(ARGV[i + 1]) then
      return status
    end
    if ARGV[i] == 'h' and holder and holder ~= ARGV[i + 1] then
      return status
    end
  end
  local fields = {}
  local new_status = status
  for i = first, last, 2 do
    local value = ARGV[i + 1]
    if ARGV[i] == 's' then
      if cancelled and (mode == 'final' or value == 'retrying') then
        value = 'cancelled'
      end
      new_status = value
    end
    fields[#fields + 1] = ARGV[i]
    fields[#fields + 1] = value
  end
  if #fields > 0 then
    redis.call('HSET', record, unpack(fields))
  end
  redis.call('EXPIRE', record, ttl)
  if new_status and final[new_status] and watched then
    redis.call('RPUSH', done, '1')
    redis.call('EXPIRE', done, ttl)
  end
  return new_status
end

local statuses = {}
local at = 1
for k = 1, #KEYS / 2 do
  local pairs = tonumber(ARGV[at + 2])
  local last = at + 2 + 2 * pairs
  -- false, not nil, for a record without a status: a nil would cut the reply short.
  statuses[k] = write(KEYS[2 * k - 1], KEYS[2 * k], ARGV[at], ARGV[at + 1], at + 3,
                      last - 1) or false
  at = last + 1
end
return statuses
