"""Redis: connection, embedded server, broker and its Lua scripts, key names, sharding."""
