-- Part (not a script): included by promote_due.lua and fair_feed.lua at their include
-- line (store/scripts.py puts it in at load time).
--
-- add_moved(reply, message, sid): append to `reply` what the caller needs to give a moved
-- message's record its entry (`Records.promoted_entries`): its id, its dispatch token
-- ('' for an older body without one) and its new stream id. `message` is the decoded
-- body; anything else (a body that is not a message) gives the id ''.
local function add_moved(reply, message, sid)
  local id, tok = '', ''
  if type(message) == 'table' and type(message['id']) == 'string' then
    id = message['id']
    if type(message['tok']) == 'string' then
      tok = message['tok']
    end
  end
  reply[#reply + 1] = id
  reply[#reply + 1] = tok
  reply[#reply + 1] = sid
end
