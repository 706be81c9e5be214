"""A lease on one key: the Redis side of `scheduling/election.py`.

The key holds the holder's identity (a str) with a PX TTL. It is taken with SET NX PX,
extended only by its holder (`lua/lease_renew.lua`, compare-and-extend) and deleted
only by its holder (`lua/lease_release.lua`, compare-and-delete), so a process that lost
the lease can never extend or delete its successor's. Every method is one round trip;
Redis outage errors (`errors.REDIS_DOWN`) pass through unchanged.
"""

from __future__ import annotations

from typing import Any

from django_taskrunner.store import scripts
from django_taskrunner.store.values import text


class Lease:
    """One lease key (e.g. `keys.leader_key`) on one client."""

    def __init__(self, client: Any, key: str) -> None:
        self.client = client
        self.key = key

    def take(self, identity: str, ttl_ms: int) -> bool:
        """SET key identity NX PX ttl_ms: True when the lease was free and is now ours."""
        return bool(self.client.set(self.key, identity, nx=True, px=ttl_ms))

    def renew(self, identity: str, ttl_ms: int) -> bool:
        """PEXPIRE the key to `ttl_ms` if `identity` holds it; False when it does not."""
        return bool(scripts.run(self.client, "lease_renew", [self.key], [identity, ttl_ms]))

    def release(self, identity: str) -> bool:
        """DEL the key if `identity` holds it; True when it did."""
        return bool(scripts.run(self.client, "lease_release", [self.key], [identity]))

    def holder(self) -> str | None:
        """GET: the identity holding the lease, or None."""
        value = self.client.get(self.key)
        return None if value is None else text(value)

    def expire_broken(self, ttl_ms: int) -> None:
        """PEXPIRE the key, whatever it holds: a key with no expiry or of another type
        (no lease of ours) then goes by itself, and the lease can be taken again."""
        self.client.pexpire(self.key, ttl_ms)

    def ttl_ms(self) -> int:
        """PTTL: milliseconds the lease has left; negative when gone (-2) or without TTL."""
        return int(self.client.pttl(self.key))
