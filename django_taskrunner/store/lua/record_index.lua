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

-- include: finished_index.lua

redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
return tend_index(KEYS[1], tonumber(ARGV[3]), ARGV[4], ARGV[5])
