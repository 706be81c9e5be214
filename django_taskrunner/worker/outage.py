"""Redis outages as the worker sees them: one log line when Redis goes away, one when it
is back, however many threads (fetchers, acker, heartbeat, reclaimer, monitor) notice it.

Each thread retries on its own with `backoff()`, through `redis_call()`, the one retry
loop of the worker and of `runtasks` at start-up; none of them exits because of an outage.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from django_taskrunner.core import clock
from django_taskrunner.store.errors import (
    REDIS_DOWN,
    REDIS_ERROR,
    outage_text,
    refuses_writes,
    stalls_writes,
)

logger = logging.getLogger(__name__)

__all__ = ["RedisStatus", "backoff", "redis_call"]
T = TypeVar("T")
# What to wait for before the next try: `wait(seconds, failures)` sleeps (or waits on a
# stop event) and returns True to give up.
Wait = Callable[[float, int], bool]
BACKOFF_START_SECONDS = 0.1
BACKOFF_CAP_SECONDS = 2.0


def backoff(failures: int) -> float:
    """Seconds to wait after `failures` failed attempts in a row: doubling, capped."""
    return min(BACKOFF_CAP_SECONDS, BACKOFF_START_SECONDS * 2 ** max(failures - 1, 0))


class RedisStatus:
    """Whether the worker currently reaches Redis; logs only the changes."""

    def __init__(self, meanwhile: str = "retrying with backoff, running tasks go on",
                 back: str = "Redis is reachable again",
                 writes_back: str = "Redis takes writes again") -> None:
        self.meanwhile = meanwhile  # what the first log line of an outage says happens next
        self.back = back  # what its last line says (`writes_back`: after a refusal)
        self.writes_back = writes_back
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self._refused_since: float | None = None
        self._back_at = float("-inf")

    @property
    def down(self) -> bool:
        return self._down_since is not None

    def up_for(self) -> float:
        """Seconds since the last outage ended (infinite if there was none; 0 while down)."""
        if self._down_since is not None:
            return 0.0
        return clock.monotonic() - self._back_at

    def failed(self, error: BaseException, doing: str) -> None:
        """A Redis call failed; the first failure of an outage is logged. A server that
        refuses writes (OOM...) but answers reads is an outage of its own: reads that
        work do not end it, only a write that went through (`succeeded(wrote=True)`)."""
        refusal = refuses_writes(error) and not isinstance(error, REDIS_DOWN)
        with self._lock:
            if refusal:
                if self._refused_since is not None:
                    return
                self._refused_since = clock.monotonic()
            else:
                if self._down_since is not None:
                    return
                self._down_since = clock.monotonic()
        logger.error("%s (%s: %s) while %s; %s", outage_text(error), type(error).__name__,
                     error, doing, self.meanwhile)

    def succeeded(self, wrote: bool = False) -> None:
        """A Redis call worked (`wrote`: a write); the end of an outage is logged."""
        if self._down_since is None and (not wrote or self._refused_since is None):
            return  # the common case, without taking the lock
        with self._lock:
            since, self._down_since = self._down_since, None
            if since is not None:
                self._back_at = clock.monotonic()
            refused = None
            if wrote:
                refused, self._refused_since = self._refused_since, None
        for began, what in ((since, self.back), (refused, self.writes_back)):
            if began is not None:
                logger.warning("%s after %.1fs", what, clock.monotonic() - began)


def redis_call(
    call: Callable[[], T], *, status: RedisStatus, doing: str, wait: Wait | None = None,
    writes: bool = False,
) -> T | None:
    """`call()`'s result; while Redis is down, try again after `backoff()` until `wait`
    gives up (then None). Without `wait`, one try: None if Redis is down.

    Outages go through `status` (logged once, `doing` saying what failed): Redis
    unreachable, or refusing writes for now (`errors.refuses_writes`: OOM at maxmemory,
    READONLY, LOADING...); other errors pass through. `writes`: `call` writes, so its
    success also ends a refusal.
    """
    failures = 0
    while True:
        try:
            result = call()
        except REDIS_ERROR as exc:
            if not stalls_writes(exc):
                raise
            failures += 1
            status.failed(exc, doing)
            if wait is None or wait(backoff(failures), failures):
                return None
            continue
        status.succeeded(wrote=writes)
        return result
