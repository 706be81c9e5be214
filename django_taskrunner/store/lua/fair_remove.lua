-- Take one waiting task out of its fair key's list (cancel, or the admin deleting it),
-- and the key out of the ring when that empties its list.
--
-- KEYS[1] the key's list     <prefix>:{<queue>}:fair[!<p>]:<key>
-- KEYS[2] the ring           <prefix>:{<queue>}:fair-ring[!<p>]
-- KEYS[3] the turns hash     <prefix>:{<queue>}:fair-turns[!<p>]
-- ARGV[1] the fair key
-- ARGV[2] the task's id: the first body of the list whose "id" it is goes
-- Returns 1 when a task was removed, else 0.

local bodies = redis.call('LRANGE', KEYS[1], 0, -1)
for _, body in ipairs(bodies) do
  local ok, message = pcall(cjson.decode, body)
  if ok and type(message) == 'table' and message['id'] == ARGV[2] then
    redis.call('LREM', KEYS[1], 1, body)
    if redis.call('LLEN', KEYS[1]) == 0 then
      redis.call('LREM', KEYS[2], 0, ARGV[1])
      redis.call('HDEL', KEYS[3], 'u:' .. ARGV[1], 'w:' .. ARGV[1])
    end
    return 1
  end
end
return 0
