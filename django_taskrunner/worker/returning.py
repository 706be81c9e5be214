"""A worker that comes back after it was declared lost: it stops, it does not ack.

A worker paused for longer than `WORKER_LOST_AFTER` (SIGSTOP, a frozen virtual machine,
a network cut) was declared lost by the leader (`lost_workers.py`), which wrote a mark
(`keys.lost_mark_key`) and took its messages: they run elsewhere. When it comes back,
its threads all resume at once, and what it held is no longer its own.

- The monitor reads the mark just after each heartbeat it writes when the one before
  was late (half of `WORKER_LOST_AFTER` or more: it may have been declared lost), and
  every `CHECK_EVERY_S` anyway (two hosts' clocks may disagree). Writing the heartbeat
  first and then reading the mark, while the leader writes the mark first and then reads
  the heartbeat, one of the two always sees the other.
- Before a fetch, a task's start and a batch of acks, `confirm()` reads the mark too
  when the last heartbeat confirmed is that old: after a SIGCONT the monitor may not be
  the first thread to run. Otherwise it costs no round trip.

Once the mark is found the worker fetches and starts nothing, sends no ack nor task
record (the acker drops them: `Acker.abandon`), leaves its running tasks where they are
and exits with `LOST_EXIT`, so that its process manager, or its supervisor, starts it
again under a fresh start (which clears the mark of its name). Only messages it fetched
after coming back go back on their queue (`requeue.lua` moves only what is still its own).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from django_taskrunner.core import clock
from django_taskrunner.store.errors import REDIS_DOWN
from django_taskrunner.store.streams import Broker

logger = logging.getLogger(__name__)

LOST_EXIT = 75  # EX_TEMPFAIL: start me again
CHECK_EVERY_S = 5.0  # the longest the monitor goes without reading the mark
RECHECK_S = 0.25  # while late, `confirm()` reads the mark at most this often
LOCK_WAIT_S = 2.0  # the longest `confirm()` waits for another thread's read of the mark


class ReturnGuard:
    """Tells a worker that came back after being declared lost; `on_lost(cause)` once."""

    def __init__(self, broker: Broker, consumer: str, lost_after: float,
                 on_lost: Callable[[str], None]) -> None:
        self.broker, self.consumer, self.on_lost = broker, consumer, on_lost
        self.late_after = lost_after / 2
        self.confirmed = clock.monotonic()  # the last heartbeat known to count
        self.checked = self.confirmed  # the last read of the mark
        self.cause: str | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """A fresh start holds nothing: a mark left for this name is not for this worker."""
        try:
            self.broker.clear_lost_mark(self.consumer)
        except REDIS_DOWN as exc:
            logger.debug("could not clear the lost mark of %s (%s)", self.consumer, exc)
        self.confirmed = self.checked = clock.monotonic()

    def beaten(self) -> None:
        """The monitor wrote the heartbeat: read the mark if the one before was late or
        the last read is old, then count this heartbeat."""
        now = clock.monotonic()
        if now - self.confirmed >= self.late_after or now - self.checked >= CHECK_EVERY_S:
            with self._lock:
                if not self._read_mark(now):
                    return
        self.confirmed = now

    def confirm(self) -> bool:
        """False once this worker is known lost: fetch, start and ack nothing. Reads the
        mark only when the last heartbeat confirmed is late."""
        if self.cause is not None:
            return False
        now = clock.monotonic()
        if now - self.confirmed < self.late_after:
            return True
        # Another thread may be reading it (right after a SIGCONT: the monitor): wait for
        # its answer, but a hung Redis must not hold every thread here for long.
        if not self._lock.acquire(timeout=LOCK_WAIT_S):
            return self.cause is None
        try:
            if now - self.checked < RECHECK_S:
                return self.cause is None
            return self._read_mark(now)
        finally:
            self._lock.release()

    def _read_mark(self, now: float) -> bool:
        """True when no mark is found (or Redis cannot say: at least once). Under `_lock`."""
        if self.cause is not None:
            return False
        self.checked = now
        try:
            cause = self.broker.lost_mark(self.consumer)
        except REDIS_DOWN:
            return True
        if cause is None:
            return True
        if self.cause is None:
            self.cause = cause
            self.on_lost(cause)
        return False
