-- Write fields of one task's record, as the worker learns them, with the record's TTL.
--
-- 'update' (started, progress, a retry coming): nothing is written once the record is
-- final (a client cancelled it while it was queued): a cancelled task stays cancelled.
-- 'final' (succeeded, failed, expired, cancelled): a record whose cancel flag is set
-- ends 'cancelled' whatever the outcome; then the waiters (if any) are woken.
--
-- KEYS[1] the record   <prefix>:record:{<id>}
-- KEYS[2] its done list <prefix>:record:{<id>}:done
-- ARGV[1] 'update' or 'final'
-- ARGV[2] TTL in seconds
-- ARGV[3...] field, value pairs (field 's' is the status, 'h' the dispatch's holder)
-- Returns the status now recorded.

-- What the record holds now, in one call: status, attempt, holder, cancel flag, watched.
local now = redis.call('HMGET', KEYS[1], 's', 'a', 'h', 'c', 'wt')
local status, attempt, holder = now[1], now[2], now[3]
local cancelled, watched = now[4] == '1', now[5]
local final = {succeeded = true, failed = true, cancelled = true, expired = true}
if status and final[status] and (ARGV[1] == 'update' or status == 'cancelled') then
  return status
end
-- A late beat of an attempt must not overwrite a later attempt's record ('a' field),
-- nor any write of one dispatch a later dispatch of the same task_id ('h', its holder).
for i = 3, #ARGV, 2 do
  if ARGV[1] == 'update' and ARGV[i] == 'a' and attempt
      and tonumber(attempt) > tonumber(ARGV[i + 1]) then
    return status
  end
  if ARGV[i] == 'h' and holder and holder ~= ARGV[i + 1] then
    return status
  end
end
local fields = {}
local new_status = status
for i = 3, #ARGV, 2 do
  local value = ARGV[i + 1]
  if ARGV[i] == 's' then
    if cancelled and (ARGV[1] == 'final' or value == 'retrying') then
      value = 'cancelled'
    end
    new_status = value
  end
  fields[#fields + 1] = ARGV[i]
  fields[#fields + 1] = value
end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('EXPIRE', KEYS[1], ARGV[2])
if new_status and final[new_status] and watched then
  redis.call('RPUSH', KEYS[2], '1')
  redis.call('EXPIRE', KEYS[2], ARGV[2])
end
return new_status
