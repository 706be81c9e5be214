-- Cluster-safe: yes: one key, the lease, in KEYS
--
-- Resign the leader lease, only if the caller holds it (compare-and-delete), so a
-- leader that lost its lease never deletes its successor's.
--
-- KEYS[1] lease           <prefix>:leader:<group>
-- ARGV[1] holder identity
-- Returns 1 when deleted, 0 otherwise.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
