"""Leader election on one Redis key, usable on its own.

The lease (`store/schedule.py`) is taken with `SET key identity NX PX lease`, extended only
by its holder (a Lua compare-and-extend) and resigned only by its holder
(compare-and-delete), so a process that lost the lease can never extend or delete its
successor's. A process that does not lead waits until the lease would expire and tries
again, so it takes over within one lease period after the leader dies, even by `kill -9`.

    election = LeaderElection(client, "myapp:leader", lease=10,
                              on_promote=start_jobs, on_demote=stop_jobs)
    election.start()      # a daemon thread: acquire, renew, step down when lost
    ...
    election.stop()       # on_demote, then resign so another process takes over at once

Two processes can believe they lead for a moment (a leader paused past its lease), so
the work a leader does must itself be safe to run twice: in django-taskrunner every
step the scheduler takes is one atomic script.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable
from typing import Any

from django_taskrunner.core import clock
from django_taskrunner.store.errors import REDIS_DOWN, REPLY_ERROR, stalls_writes
from django_taskrunner.store.schedule import Lease

logger = logging.getLogger(__name__)

# Part of the lease a leader keeps in hand: it stops acting as leader this much before
# the lease it last extended could expire in Redis (clock drift, command latency).
SAFETY_FRACTION = 0.1


def default_identity() -> str:
    """Unique per election instance: host, pid and a random suffix."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"


class LeaderElection:
    """Holds, renews and resigns one lease; calls `on_promote`/`on_demote` on changes."""

    def __init__(
        self, client: Any, key: str, *, lease: float = 10.0, identity: str | None = None,
        on_promote: Callable[[], None] | None = None,
        on_demote: Callable[[], None] | None = None, poll_interval: float | None = None,
        store: Lease | None = None,
    ) -> None:
        """The lease `key` on redis `client`, or, with `store`, that lease (`client` and
        `key` are then ignored): the client is only ever handed to `store.leases.Lease`."""
        if lease <= 0:
            raise ValueError(f"lease must be positive seconds, not {lease!r}")
        self.lease_store = store if store is not None else Lease(client, key)
        self.key = self.lease_store.key
        self.lease = float(lease)
        self.identity = identity or default_identity()
        self.on_promote = on_promote
        self.on_demote = on_demote
        self.renew_every = self.lease / 3
        self.poll_interval = poll_interval if poll_interval is not None else self.lease / 4
        self._leading = threading.Event()
        self._stopping = threading.Event()
        self._valid_until = 0.0  # monotonic time past which we no longer act as leader
        self._thread: threading.Thread | None = None
        self._broken = False  # the lease key held no lease (logged once until it heals)

    @property
    def lease_ms(self) -> int:
        return max(1, round(self.lease * 1000))

    @property
    def is_leader(self) -> bool:
        """True while this instance holds a lease it extended recently enough."""
        return self._leading.is_set() and clock.monotonic() < self._valid_until

    def wait_for_leadership(self, timeout: float) -> bool:
        """Block until this instance leads (True) or `timeout` seconds pass (False)."""
        return self._leading.wait(timeout)

    # -- one step each: usable without the thread ----------------------------------------

    def try_acquire(self) -> bool:
        """Take the lease if nobody holds it (SET NX PX)."""
        sent = clock.monotonic()
        if self.lease_store.take(self.identity, self.lease_ms):
            self._valid_until = sent + self.lease * (1 - SAFETY_FRACTION)
            return True
        return False

    def renew(self) -> bool:
        """Extend the lease if we still hold it; False when it was lost."""
        sent = clock.monotonic()
        if self.lease_store.renew(self.identity, self.lease_ms):
            self._valid_until = sent + self.lease * (1 - SAFETY_FRACTION)
            return True
        return False

    def resign(self) -> bool:
        """Delete the lease if we hold it, so another process takes over at once."""
        self._valid_until = 0.0
        return self.lease_store.release(self.identity)

    def holder(self) -> str | None:
        """Identity of the current leader, if any."""
        return self.lease_store.holder()

    # -- the loop ------------------------------------------------------------------------

    def start(self, watch: Callable[[list[threading.Thread]], None] | None = None) -> None:
        """Run the election in a daemon thread until `stop()`; `watch` (a worker's
        thread watch) is handed that thread before it starts."""
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="taskrunner-election",
                                        daemon=True)
        if watch is not None:
            watch([self._thread])
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread; a leader is demoted (callback) and resigns its lease."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._leading.is_set():
            self._demote("stopping")
        try:
            self.resign()
        except REDIS_DOWN as exc:
            logger.warning("could not resign lease %s (%s); it expires by itself", self.key, exc)

    def _run(self) -> None:
        while not self._stopping.is_set():
            wait = self.step()
            self._stopping.wait(wait)

    def step(self) -> float:
        """Acquire or renew once, firing callbacks on a change; returns seconds to wait."""
        try:
            if self._leading.is_set():
                if self.renew():
                    return self.renew_every
                self._demote("lease lost to another process")
            if self.try_acquire():
                self._promote()
                return self.renew_every
            remaining_ms = self.lease_store.ttl_ms()
            if remaining_ms == -1:  # a key without expiry: no lease of ours, nobody leads
                self._repair("it has no expiry")
                return min(self.poll_interval, 1.0)
        except REPLY_ERROR as exc:
            if stalls_writes(exc):  # at maxmemory, a replica, loading: as an outage
                return self._redis_down(exc)
            # WRONGTYPE: the key holds something else (written by hand, another program).
            if self._leading.is_set():
                self._demote(f"its lease key cannot be renewed: {exc}")
            self._repair(str(exc))
            return min(self.poll_interval, 1.0)
        except REDIS_DOWN as exc:
            return self._redis_down(exc)
        self._broken = False
        if remaining_ms < 0:
            return 0.01  # gone just now: try again at once
        # Wake just as the leader's lease would expire, or earlier to notice a resignation.
        return max(0.005, min(self.poll_interval, remaining_ms / 1000 + 0.002))

    def _redis_down(self, exc: Exception) -> float:
        """Redis unreachable or refusing writes: lead on until the lease could have
        expired, then step down; try again soon."""
        if self._leading.is_set() and clock.monotonic() >= self._valid_until:
            self._demote(f"cannot renew the lease: {exc}")
        return min(self.poll_interval, 1.0)

    def _repair(self, why: str) -> None:
        """The lease key holds no lease (`why`): set it to expire in one lease, so that it
        heals by itself and a process leads again, instead of nobody leading for ever."""
        if not self._broken:
            logger.error("lease key %s holds no lease (%s): it is set to expire in %.1f s, "
                         "then a process leads again", self.key, why, self.lease)
            self._broken = True
        try:
            self.lease_store.expire_broken(self.lease_ms)
        except REDIS_DOWN:
            pass  # the next step tries again

    def _promote(self) -> None:
        self._leading.set()
        logger.info("%s leads %s", self.identity, self.key)
        self._call(self.on_promote, "on_promote")

    def _demote(self, why: str) -> None:
        self._leading.clear()
        level = logging.INFO if why == "stopping" else logging.WARNING
        logger.log(level, "%s no longer leads %s: %s", self.identity, self.key, why)
        self._call(self.on_demote, "on_demote")

    def _call(self, callback: Callable[[], None] | None, what: str) -> None:
        if callback is None:
            return
        try:
            callback()
        except Exception:
            logger.exception("election %s: %s callback failed", self.key, what)
