-- Part (not a script): included by enqueue.lua, record_or_entry.lua, cancel_entry.lua and
-- purge_stream.lua at their include line (store/scripts.py puts it in at load time).
--
-- last_delivered(stream, group): the last-delivered id of consumer group `group` of
-- `stream`, as {ms, seq}; nil while the stream or the group does not exist (nothing was
-- delivered).
-- at_or_before(id, last): stream id `id` is at or before `last` ({ms, seq}); false for an
-- id that is not one.
-- delivered(stream, group, id): true once the group has been delivered the entry `id` (or
-- a later one); false while the stream or the group does not exist.
local function last_delivered(stream, group)
  local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', stream)
  if not ok then
    return nil
  end
  for _, info in ipairs(groups) do
    local name, last
    for i = 1, #info, 2 do
      if info[i] == 'name' then
        name = info[i + 1]
      elseif info[i] == 'last-delivered-id' then
        last = info[i + 1]
      end
    end
    if name == group and last then
      local ms, seq = string.match(last, '^(%d+)-(%d+)$')
      return {tonumber(ms), tonumber(seq)}
    end
  end
  return nil
end

local function at_or_before(id, last)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  if not ms then
    return false
  end
  ms, seq = tonumber(ms), tonumber(seq)
  return ms < last[1] or (ms == last[1] and seq <= last[2])
end

local function delivered(stream, group, id)
  local last = last_delivered(stream, group)
  return last ~= nil and at_or_before(id, last)
end
