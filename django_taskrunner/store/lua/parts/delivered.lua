-- Part (not a script): included by enqueue.lua and record_or_entry.lua at their include
-- line (store/scripts.py puts it in at load time).
--
-- delivered(stream, group, id): true once consumer group `group` of `stream` has been
-- delivered the entry `id` (or a later one): its last-delivered id is at or past `id`.
-- False while the stream or the group does not exist (nothing was delivered).
local function delivered(stream, group, id)
  local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', stream)
  if not ok then
    return false
  end
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
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
      local lms, lseq = string.match(last, '^(%d+)-(%d+)$')
      lms, lseq = tonumber(lms), tonumber(lseq)
      return tonumber(ms) < lms or (tonumber(ms) == lms and tonumber(seq) <= lseq)
    end
  end
  return false
end
