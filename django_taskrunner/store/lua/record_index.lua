-- List a finished task in its queue's index of finished tasks (the admin's "finished"
-- list), on a cluster, where the index (the queue's slot) cannot share record_write.lua
-- with the record (the id's slot): queued right after that script in the same pipeline.
-- ZADD of the id at its finish time, then the index trimmed to its newest ARGV[3] ids
-- and to those finished since ARGV[4]; it expires with the longest record it lists.
--
-- KEYS[1] the finished index <prefix>:{<queue>}:finished
-- ARGV[1] the task id, ARGV[2] its finish time (epoch ms)
-- ARGV[3] ids kept, ARGV[4] the oldest finish time kept (epoch ms)
-- ARGV[5] the index's TTL in seconds
-- Returns the ids the index holds now.

redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[4])
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -tonumber(ARGV[3]) - 1)
local left = redis.call('TTL', KEYS[1])  -- renewed once a minute, never shortened
if left < 0 or left < tonumber(ARGV[5]) - 60 then
  redis.call('EXPIRE', KEYS[1], ARGV[5])
end
return redis.call('ZCARD', KEYS[1])
