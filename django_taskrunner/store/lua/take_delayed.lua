-- Cluster-safe: yes: the delayed set and the stream, both tagged {<queue>}, both in KEYS
--
-- Take one message out of a queue's delayed set, found by its due time and id: move it
-- onto the stream at once ("run now") or drop it ("cancel"). Find, remove and add in
-- one script, so the message is never both run now and promoted by the scheduler.
--
-- KEYS[1] delayed set     <prefix>:{<queue>}:delayed
-- KEYS[2] stream          <prefix>:{<queue>}:stream
-- ARGV[1] due time in epoch ms (the entry's score)
-- ARGV[2] message id
-- ARGV[3] "run" to XADD it to the stream, "cancel" to drop it
-- Returns {the removed message body, its new stream id ('' when dropped)}, or false
-- when no such entry is waiting.

local candidates = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[1], ARGV[1])
for _, body in ipairs(candidates) do
  local ok, message = pcall(cjson.decode, body)
  if ok and type(message) == 'table' and message['id'] == ARGV[2] then
    redis.call('ZREM', KEYS[1], body)
    local sid = ''
    if ARGV[3] == 'run' then
      sid = redis.call('XADD', KEYS[2], '*', 'm', body)
    end
    return {body, sid}
  end
end
return false
