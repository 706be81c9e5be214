-- Part (not a script): included by record_write.lua and record_index.lua at their include
-- line (store/scripts.py puts it in at load time).
--
-- tend_index(key, keep, cutoff, ttl): after ids were listed in a queue's index of finished
-- tasks, trim it once it holds 1% more than the `keep` ids it keeps (so a trim runs once
-- per 1% of new ids, not on each write), to its newest `keep` and to those finished since
-- `cutoff` (epoch ms); renew its TTL once a minute (never shortened). Returns the ids it
-- holds now.
local function tend_index(key, keep, cutoff, ttl)
  local held = redis.call('ZCARD', key)
  if held > keep + math.ceil(keep / 100) then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. cutoff)
    redis.call('ZREMRANGEBYRANK', key, 0, -keep - 1)
    held = redis.call('ZCARD', key)
  end
  local left = redis.call('TTL', key)
  if left < 0 or left < tonumber(ttl) - 60 then
    redis.call('EXPIRE', key, ttl)
  end
  return held
end
