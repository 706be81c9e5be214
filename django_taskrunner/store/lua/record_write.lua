-- Cluster-safe: yes with one record per call and no index, as the store calls it on a
--   cluster (the record, its done list and its steps hash are tagged {<id>}); a batch, or
--   the finished index ({<queue>}), spans slots, a single server only
--
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
-- A final write may also list the task in its queue's index of finished tasks (the
-- admin's "finished" list): ZADD of the id at this write's finish time ('f': for a task
-- cancelled before it started, when its worker dropped it); once it holds 1% more than
-- the ids it keeps, it is trimmed to its newest ones and to those finished since the
-- oldest finish time kept (so a trim runs once per 1% of new ids, not on each write; a
-- page skips and drops an id whose record expired meanwhile). A single server only: on
-- a cluster the index is in the queue's slot, not the record's, and `record_index.lua`
-- does the same in the acker's pipeline (store/records.py).
--
-- A wait on a rate or concurrency limit (the worker's 'delayed' write with 'lw', the
-- limit, and 'lws', when it started waiting) is closed by the next write of another
-- status (its start, or an outcome): the script moves it to 'lx:<lws>' = JSON [started
-- waiting, got its slot ('st' of that write, else 'f', else now), the limit] and drops
-- 'lws' and 'lw'. A wait written again (the task still refused) keeps its first 'lws'
-- when the limit is the same. A record that never waited pays two more fields read by
-- the HMGET the script does anyway, nothing else.
--
-- A write whose task may have kept durable steps gives its steps hash the TTL it gives
-- the record: the steps live as long as the record, renewed by each attempt's start,
-- progress, retry or put-back, and by the final write to the finished record's TTL.
--
-- KEYS, for each record: the record <prefix>:record:{<id>}, its done list
-- <prefix>:record:{<id>}:done, when its task may have steps its steps hash
-- <prefix>:record:{<id>}:steps, then, when it is indexed, its queue's finished index
-- <prefix>:{<queue>}:finished
-- ARGV, for each record in turn (plain arguments, not a JSON batch: the client packs
-- them in C, where encoding a batch's JSON and decoding it here cost more per record):
-- mode ('update' or 'final'), TTL in seconds, indexed (1 or 0), the ids the index
-- keeps, the oldest finish time it keeps (epoch ms), the task id (its member), steps (1:
-- its steps hash is among the KEYS, or 0), n, then n arguments: field, value, ... (field
-- 's' the status, 'h' the dispatch's holder)
-- Returns the status now recorded, per record (false: none).

-- include: record_final.lua
-- include: finished_index.lua
-- include: now_ms.lua

-- The finished indexes this call listed tasks in: key -> {keep, cutoff, ttl}, the
-- longest TTL; their trims and TTLs are seen to once per call, not once per task.
local listed_in = {}

-- List the task in the finished index.
local function index(key, keep, cutoff, member, ttl, finished_ms)
  local score = tonumber(finished_ms)
  if not score then
    score = now_ms()
  end
  redis.call('ZADD', key, score, member)
  local seen = listed_in[key]
  if not seen or tonumber(ttl) > tonumber(seen[3]) then
    listed_in[key] = {keep, cutoff, ttl}
  end
end

-- The value of field `name` among `kv` (field, value, ...).
local function field(name, kv)
  for i = 1, #kv, 2 do
    if kv[i] == name then
      return kv[i + 1]
    end
  end
  return nil
end

-- A limit wait begun at `since` on limit `limit`, and this write (`kv`, its status
-- `new_status` or nil): the same wait again keeps its start; any other status (or
-- another limit) ends it, into field 'lx:<since>'.
local function close_wait(record, since, limit, kv, new_status)
  if new_status == nil then
    return  -- a progress write, or a field of no status: the wait goes on
  end
  local next_limit = field('lw', kv)
  if new_status == 'delayed' and next_limit == limit then
    for i = 1, #kv, 2 do
      if kv[i] == 'lws' then
        kv[i + 1] = since
      end
    end
    return
  end
  local ended = field('st', kv) or field('f', kv) or field('lws', kv)
  if not ended then
    ended = tostring(now_ms())
  end
  redis.call('HSET', record, 'lx:' .. since, cjson.encode({since, ended, limit or ''}))
  if new_status ~= 'delayed' then
    redis.call('HDEL', record, 'lws', 'lw')
  end
end

-- One record (its key, its done list, its steps hash or false, its finished index or
-- false, and its write); the status it holds afterwards. The hot path of every finished
-- task: one pass over the fields, and no table or closure of its own.
local function write(record, done, steps, index_key, mode, ttl, keep, cutoff, member, kv)
  -- What the record holds now, in one call: status, attempt, holder, cancel flag, watched.
  local now = redis.call('HMGET', record, 's', 'a', 'h', 'c', 'wt', 'lws', 'lw')
  local status, attempt, holder = now[1], now[2], now[3]
  local final_write = mode == 'final'
  local listed = index_key and final_write and keep > 0
  if status and final[status] and (not final_write or status == 'cancelled') then
    if status == 'cancelled' and listed then  -- when the worker dropped it, as on a cluster
      index(index_key, keep, cutoff, member, ttl, field('f', kv))
    end
    if steps and final_write then  -- cancelled meanwhile: the steps go with the record
      local left = redis.call('TTL', record)
      if left > 0 then
        redis.call('EXPIRE', steps, left)
      end
    end
    return status
  end
  -- A late beat of an attempt must not overwrite a later attempt's record ('a' field),
  -- nor any write of one dispatch a later dispatch of the same task_id ('h', its holder).
  local status_at, finished_ms
  for i = 1, #kv, 2 do
    local name = kv[i]
    if name == 's' then
      status_at = i + 1
    elseif name == 'f' then
      finished_ms = kv[i + 1]
    elseif name == 'a' then
      if not final_write and attempt and tonumber(attempt) > tonumber(kv[i + 1]) then
        return status
      end
    elseif name == 'h' and holder and holder ~= kv[i + 1] then
      return status
    end
  end
  if now[6] then
    close_wait(record, now[6], now[7], kv, status_at and kv[status_at])
  end
  local new_status = status
  if status_at then
    local value = kv[status_at]
    if now[4] == '1' and (final_write or value == 'retrying') then
      value = 'cancelled'
      kv[status_at] = value
    end
    new_status = value
  end
  if #kv > 0 then
    redis.call('HSET', record, unpack(kv))
  end
  redis.call('EXPIRE', record, ttl)
  if steps then
    redis.call('EXPIRE', steps, ttl)
  end
  if new_status and final[new_status] then
    if now[5] then  -- watched: wake the waiters
      wake_waiters(done, ttl)
    end
    if listed then
      index(index_key, keep, cutoff, member, ttl, finished_ms)
    end
  end
  return new_status
end

local statuses = {}
local key, arg, k = 1, 1, 0
while arg <= #ARGV do
  k = k + 1
  local indexed = ARGV[arg + 2] == '1'
  local stepped = ARGV[arg + 6] == '1'
  local n = tonumber(ARGV[arg + 7])
  local at = key + (stepped and 3 or 2)
  -- false, not nil, for a record without a status: a nil would cut the reply short.
  statuses[k] = write(KEYS[key], KEYS[key + 1], stepped and KEYS[key + 2],
                      indexed and KEYS[at], ARGV[arg], ARGV[arg + 1],
                      tonumber(ARGV[arg + 3]), ARGV[arg + 4], ARGV[arg + 5],
                      {unpack(ARGV, arg + 8, arg + 7 + n)}) or false
  key = at + (indexed and 1 or 0)
  arg = arg + 8 + n
end
for index_key, seen in pairs(listed_in) do
  tend_index(index_key, seen[1], seen[2], seen[3])
end
return statuses
