"""Redis outages as the worker sees them: one log line when Redis goes away, one when it
is back, however many threads (fetchers, acker, heartbeat, reclaimer) notice it.

Each thread retries on its own with `backoff()`; none of them exits because of an outage.
"""

from __future__ import annotations

import logging
import threading

from django_taskrunner.core import clock
from django_taskrunner.store.errors import REDIS_DOWN

logger = logging.getLogger(__name__)

__all__ = ["REDIS_DOWN", "RedisStatus", "backoff"]  # REDIS_DOWN: one tuple, redis_errors.py
BACKOFF_START_SECONDS = 0.1
BACKOFF_CAP_SECONDS = 2.0


def backoff(failures: int) -> float:
    """Seconds to wait after `failures` failed attempts in a row: doubling, capped."""
    return min(BACKOFF_CAP_SECONDS, BACKOFF_START_SECONDS * 2 ** max(failures - 1, 0))


class RedisStatus:
    """Whether the worker currently reaches Redis; logs only the changes."""

    def __init__(self) -> None:
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
        logger.error("Redis is unreachable (%s: %s) while %s; retrying with backoff, running "
                     "tasks go on", type(error).__name__, error, doing)

    def succeeded(self) -> None:
        """A Redis call worked; the end of an outage is logged."""
        if self._down_since is None:  # the common case, without taking the lock
            return
        with self._lock:
            since, self._down_since = self._down_since, None
            self._back_at = clock.monotonic()
        if since is not None:
            logger.warning("Redis is reachable again after %.1fs", clock.monotonic() - since)
