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
from django_taskrunner.store.errors import REDIS_DOWN, outage_text

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

    def __init__(self, meanwhile: str = "retrying with backoff, running tasks go on") -> None:
        self.meanwhile = meanwhile  # what the first log line of an outage says happens next
        self._lock = threading.Lock()
        self._down_since: float | None = None
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
        """A Redis call failed; the first failure of an outage is logged."""
        with self._lock:
            if self._down_since is not None:
                return
            self._down_since = clock.monotonic()
        logger.error("%s (%s: %s) while %s; %s", outage_text(error), type(error).__name__,
                     error, doing, self.meanwhile)

    def succeeded(self) -> None:
        """A Redis call worked; the end of an outage is logged."""
        if self._down_since is None:  # the common case, without taking the lock
            return
        with self._lock:
            since, self._down_since = self._down_since, None
            self._back_at = clock.monotonic()
        if since is not None:
            logger.warning("Redis is reachable again after %.1fs", clock.monotonic() - since)


def redis_call(
    call: Callable[[], T], *, status: RedisStatus, doing: str, wait: Wait | None = None,
) -> T | None:
    """`call()`'s result; while Redis is down, try again after `backoff()` until `wait`
    gives up (then None). Without `wait`, one try: None if Redis is down.

    Outages go through `status` (logged once, `doing` saying what failed); other errors
    pass through.
    """
    failures = 0
    while True:
        try:
            result = call()
        except REDIS_DOWN as exc:
            failures += 1
            status.failed(exc, doing)
            if wait is None or wait(backoff(failures), failures):
                return None
            continue
        status.succeeded()
        return result
