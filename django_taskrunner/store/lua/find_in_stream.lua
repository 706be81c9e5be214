-- Cluster-safe: yes: one key, the queue's stream, in KEYS
--
-- Look for a text in the bodies of one batch of stream entries, on the server, so a
-- lookup by message id does not carry every body to the client. One bounded batch per
-- call (the caller loops with the returned cursor), so Redis is never blocked for long.
--
-- KEYS[1] the stream <prefix>:{<queue>}:stream
-- ARGV[1] where to start: a stream id, exclusive ("0-0": from the first entry)
-- ARGV[2] how many entries to look at
-- ARGV[3] the text to find, literally (e.g. '"id":"<message id>"')
-- Returns {matching ids (possibly none), the last id looked at or '' at the end}.

local rows = redis.call('XRANGE', KEYS[1], '(' .. ARGV[1], '+', 'COUNT', ARGV[2])
local found = {}
for _, row in ipairs(rows) do
  local fields = row[2]
  for i = 2, #fields, 2 do
    if string.find(fields[i], ARGV[3], 1, true) then
      found[#found + 1] = row[1]
      break
    end
  end
end
local last = ''
if #rows == tonumber(ARGV[2]) then
  last = rows[#rows][1]
end
return {found, last}
