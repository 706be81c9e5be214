-- Cluster-safe: yes: one key, the queue's finished index, in KEYS
--
-- List a finished task in its queue's index of finished tasks (the admin's "finished"
-- list), on a cluster, where the index (the queue's slot) cannot share record_write.lua
-- with the record (the id's slot): queued right after that script in the same pipeline.
-- ZADD of the id at its finish time; once it holds 1% more than ARGV[3] ids, trimmed to
-- its newest ARGV[3] and to those finished since ARGV[4] (as record_write.lua); it
-- expires with the longest record it lists.
--
-- KEYS[1] the finished index <prefix>:{<queue>}:finished
-- ARGV[1] the task id, ARGV[2] its finish time (epoch ms)
-- ARGV[3] ids kept, ARGV[4] the oldest finish time kept (epoch ms)
-- ARGV[5] the index's TTL in seconds
-- Returns the ids the index holds now.

redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
local keep = tonumber(ARGV[3])
local held = redis.call('ZCARD', KEYS[1])
if held > keep + math.ceil(keep / 100) then  -- trimmed once per 1% of new ids
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[4])
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -keep - 1)
  held = redis.call('ZCARD', KEYS[1])
end
local left = redis.call('TTL', KEYS[1])  -- renewed once a minute, never shortened
if left < 0 or left < tonumber(ARGV[5]) - 60 then
  redis.call('EXPIRE', KEYS[1], ARGV[5])
end
return held
