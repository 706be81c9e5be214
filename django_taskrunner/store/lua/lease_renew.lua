-- Cluster-safe: yes: one key, the lease, in KEYS
--
-- Extend the leader lease, only if the caller still holds it (compare-and-extend).
--
-- KEYS[1] lease           <prefix>:leader:<group>
-- ARGV[1] holder identity
-- ARGV[2] lease length in ms
-- Returns 1 when extended, 0 when the lease is held by another or has expired.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
