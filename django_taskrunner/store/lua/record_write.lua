-- Write fields of one task's record, as the worker learns them, with the record's TTL.
--
-- 'update' (started, progress, a retry coming): nothing is written once the record is
-- final (a client cancelled it while it was queued): a cancelled task stays cancelled.
-- 'final' (succeeded, failed, expired, cancelled): a record whose cancel flag is set
-- ends 'cancelled' whatever the outcome; then the waiters (if any) are woken.
--
-- A final write may also list the task in its queue's index of finished tasks (the
-- admin's "finished" list): ZADD of the id at this write's finish time ('f': for a task
-- cancelled before it started, when its worker dropped it); once it holds 1% more than
-- ARGV[3] ids, it is trimmed to its newest ARGV[3] and to those finished since ARGV[4]
-- (so a trim runs once per 1% of new ids, not on each write; a page skips and drops an
-- id whose record expired meanwhile). A single server
-- only: on a cluster the index is in the queue's slot, not the record's, and
-- `record_index.lua` does the same in the acker's pipeline (store/records.py).
--
-- KEYS[1] the record   <prefix>:record:{<id>}
-- KEYS[2] its done list <prefix>:record:{<id>}:done
-- KEYS[3] optional: the finished index <prefix>:{<queue>}:finished
-- ARGV[1] 'update' or 'final'
-- ARGV[2] TTL in seconds
-- ARGV[3] ids the index keeps ('0': no index); ARGV[4] the oldest finish time it keeps
--         (epoch ms); ARGV[5] the task id (its member)
-- ARGV[6...] field, value pairs (field 's' is the status, 'h' the dispatch's holder)
-- Returns the status now recorded.

local FIELDS = 6

-- List the task in the finished index (final writes only; also for a record a client
-- cancelled, whose final write keeps its status).
local function index(finished_ms)
  if not KEYS[3] or ARGV[1] ~= 'final' or tonumber(ARGV[3]) <= 0 then
    return
  end
  local score = tonumber(finished_ms)
  if not score then
    local now = redis.call('TIME')
    score = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  end
  redis.call('ZADD', KEYS[3], score, ARGV[5])
  local keep = tonumber(ARGV[3])
  if redis.call('ZCARD', KEYS[3]) > keep + math.ceil(keep / 100) then  -- 1 write in 100
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[4])
    redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -keep - 1)
  end
  local left = redis.call('TTL', KEYS[3])  -- renewed once a minute, never shortened
  if left < 0 or left < tonumber(ARGV[2]) - 60 then
    redis.call('EXPIRE', KEYS[3], ARGV[2])
  end
end

local function field(name)
  for i = FIELDS, #ARGV, 2 do
    if ARGV[i] == name then
      return ARGV[i + 1]
    end
  end
  return nil
end

-- What the record holds now, in one call: status, attempt, holder, cancel flag, watched.
local now = redis.call('HMGET', KEYS[1], 's', 'a', 'h', 'c', 'wt')
local status, attempt, holder = now[1], now[2], now[3]
local cancelled, watched = now[4] == '1', now[5]
local final = {succeeded = true, failed = true, cancelled = true, expired = true}
if status and final[status] and (ARGV[1] == 'update' or status == 'cancelled') then
  if status == 'cancelled' and ARGV[1] == 'final' then
    index(field('f'))  -- when the worker dropped it, as on a cluster
  end
  return status
end
-- A late beat of an attempt must not overwrite a later attempt's record ('a' field),
-- nor any write of one dispatch a later dispatch of the same task_id ('h', its holder).
for i = FIELDS, #ARGV, 2 do
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
for i = FIELDS, #ARGV, 2 do
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
if new_status and final[new_status] then
  index(field('f'))
end
return new_status
