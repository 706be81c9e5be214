"""The Redis side of rate limits and concurrency limits (see core/options.py).

Each limit is one sorted set and its waiting set, in the slot of the task's queue
(`keys.limit_key`): a rate limit's log of starts, a concurrency limit's leases. Taking
is one script (`rate_acquire.lua`, `concurrency_acquire.lua`), one round trip; renewing
a lease rides on the heartbeat's pipeline, freeing it on the acker's (`queue_renewals`,
`queue_releases`). Times are the server's (Lua `TIME`), so hosts with skewed clocks
share one limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django_taskrunner.store import keys, scripts
from django_taskrunner.store.connection import text

# A waiter's entry stays this long past its due time, for the admin's count (a waiter
# cancelled or purged meanwhile never comes back to remove it).
WAITING_GRACE_MS = 60_000
RENEW_SCRIPT = "concurrency_renew"


@dataclass(frozen=True)
class Slot:
    """A concurrency slot a running attempt holds: its key, holder and lease."""

    key: str
    holder: str
    lease_ms: int


@dataclass(frozen=True)
class Take:
    """The reply of a take: admitted (wait_ms 0), or try again in `wait_ms`."""

    wait_ms: int
    now_ms: int

    @property
    def admitted(self) -> bool:
        return self.wait_ms == 0


@dataclass(frozen=True)
class LimitState:
    """What one limit key holds now, for the admin."""

    key: str
    used: int  # starts in the current window, or slots held
    holders: tuple[str, ...]  # a concurrency limit's holders (task ids); () for a rate
    waiting: int  # task ids waiting on it


class Limits:
    """Rate logs and concurrency slots on one client and key prefix."""

    def __init__(self, client: Any, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    def take_rate(self, key: str, limit: int, window_ms: int, task_id: str) -> Take:
        """One start of `task_id` under the rate limit `key`, or how long to wait."""
        wait, now = scripts.run(
            self.client, "rate_acquire", [key, keys.waiting_of(self.prefix, key)],
            [str(limit), str(window_ms), task_id, str(WAITING_GRACE_MS)])
        return Take(int(wait), int(now))

    def take_slot(
        self, key: str, limit: int, holder: str, lease_ms: int, base_wait_ms: int,
        max_wait_ms: int,
    ) -> Take:
        """A slot of the concurrency limit `key` for `holder`, or how long to wait."""
        wait, now = scripts.run(
            self.client, "concurrency_acquire", [key, keys.waiting_of(self.prefix, key)],
            [str(limit), holder, str(lease_ms), str(base_wait_ms), str(max_wait_ms),
             str(WAITING_GRACE_MS)])
        return Take(int(wait), int(now))

    @staticmethod
    def queue_renewals(pipe: Any, slots: Sequence[Slot]) -> None:
        """Queue the renewal of each slot's lease on a pipeline (the heartbeat's), as bare
        EVALSHAs: run it with `scripts.execute_loading(..., [RENEW_SCRIPT])`."""
        for slot in slots:
            scripts.queue(pipe, RENEW_SCRIPT, [slot.key], [slot.holder, str(slot.lease_ms)])

    @staticmethod
    def queue_releases(pipe: Any, slots: Sequence[Slot]) -> None:
        """Queue the release of each slot (ZREM by its holder) on a pipeline (the acker's)."""
        for slot in slots:
            pipe.execute_command("ZREM", slot.key, slot.holder)

    def release(self, slots: Sequence[Slot]) -> None:
        """Free slots now, in one round trip."""
        if slots:
            pipe = self.client.pipeline(transaction=False)
            self.queue_releases(pipe, slots)
            pipe.execute()

    def inspect_many(self, limit_keys: Sequence[tuple[str, int]], now_ms: int) -> list[LimitState]:
        """For each (limit key, window ms; 0 for a concurrency limit), what it holds at
        `now_ms`: one pipelined round trip (ZCOUNT, ZRANGEBYSCORE of live holders, and
        ZCOUNT of the waiters)."""
        pipe = self.client.pipeline(transaction=False)
        for key, window_ms in limit_keys:
            if window_ms:
                pipe.zcount(key, f"({now_ms - window_ms}", "+inf")
            else:
                pipe.zrangebyscore(key, f"({now_ms}", "+inf")
            pipe.zcount(keys.waiting_of(self.prefix, key), now_ms - WAITING_GRACE_MS, "+inf")
        replies = pipe.execute()
        states = []
        for index, (key, window_ms) in enumerate(limit_keys):
            used, waiting = replies[2 * index], replies[2 * index + 1]
            if window_ms:
                states.append(LimitState(key, int(used), (), int(waiting)))
            else:
                holders = tuple(text(holder) for holder in used)
                states.append(LimitState(key, len(holders), holders, int(waiting)))
        return states

    def slot_holders(self, key: str, now_ms: int) -> list[str]:
        """The live holders of a concurrency limit (ZRANGEBYSCORE past `now_ms`)."""
        return [text(holder) for holder in self.client.zrangebyscore(key, f"({now_ms}", "+inf")]
