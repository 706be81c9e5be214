"""Lost workers: the leader's watch for them, and a lost worker that comes back (it
stops, it does not ack; below). The watch looks for a whole worker (a host, a container, a
`runtasks` killed with its children) that stopped without a word.

Every worker writes its heartbeat each `STATS_INTERVAL` (`worker:<name>`, with a TTL).
A consumer of the group that holds pending messages, has not read or claimed for
`WORKER_LOST_AFTER` seconds and whose heartbeat is as old (or gone) is declared lost:
its messages are handed back at once (`worker/reclaim.py`), instead of waiting for
`RESERVATION_TIMEOUT`. Both signs are needed: a worker busy with long tasks reads
nothing for a while but keeps beating, and one just started may not have beaten yet
but has just read. Both ages are the server's (the group's idle time; the heartbeat's
TTL less what is left of it), so a worker whose clock is behind the leader's is not
taken for lost.

What it was running is not known here (its supervisor, which knew, is gone too): every
message is taken by the leading worker itself, keeping its place and delivery counter,
so it runs next (a reclaimed run: `check_reclaimed` in `worker/steps.py` counts runs that died as a
reclaim after `RESERVATION_TIMEOUT` would). Without a worker to take them, they go back
to their queue unchanged.

Before taking them, the watch writes a mark (`keys.lost_mark_key`) and reads the
heartbeat again: a worker that came back meanwhile (it writes its heartbeat, then reads
the mark: `worker/lost_workers.py`) is left its messages, and leaves on its own. A worker
that comes back later finds the mark: it acks nothing more and exits, so its process
manager (or supervisor) starts it afresh.

A thread beside the scheduler, in the worker that leads (one per site).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from django_taskrunner.conf import get_settings
from django_taskrunner.core import clock
from django_taskrunner.store.errors import REDIS_DOWN
from django_taskrunner.store.streams import Broker
from django_taskrunner.worker.reclaim import Adopter, all_streams, hand_back, take_adopted

logger = logging.getLogger(__name__)

LOST_MARK_TTL_S = 86400  # how long a lost worker's mark waits for it to come back


class LostWorkerWatch(threading.Thread):
    """Hands back the messages of workers lost for `WORKER_LOST_AFTER`, until `stop()`."""

    def __init__(self, broker: Broker, queues: Iterable[str],
                 lost_after: float | None = None, adopter: Adopter | None = None) -> None:
        super().__init__(name="taskrunner-lost-workers", daemon=True)
        self.broker, self.queues, self.adopter = broker, sorted(queues), adopter
        self.lost_after = get_settings().WORKER_LOST_AFTER if lost_after is None else lost_after
        self.interval = min(1.0, self.lost_after / 4)
        self._stopping = threading.Event()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)

    def run(self) -> None:
        while not self._stopping.wait(self.interval):
            try:
                self.check()
            except REDIS_DOWN as exc:
                logger.debug("lost workers: Redis is down (%s)", exc)
            except Exception:
                logger.exception("lost workers: the check failed; trying again")

    def check(self) -> list[str]:
        """One pass: hand back what each lost worker holds; returns their names."""
        lost_ms = int(self.lost_after * 1000)
        silent = {consumer for stream in all_streams(self.broker, self.queues)
                  for consumer, _pending, idle_ms in self.broker.holders(stream)
                  if idle_ms >= lost_ms}
        if not silent:
            return []
        ages = self.broker.heartbeat_ages_ms(sorted(silent), clock.now_ms())
        lost = [name for name, age in ages.items() if age is None or age >= lost_ms]
        if not lost:
            return []
        adopters = [] if self.adopter is None else [self.adopter.consumer]
        taken = f"taken by {adopters[0]}" if adopters else "put back on their queue"
        cause = f"no heartbeat for {self.lost_after:g}s or more (WORKER_LOST_AFTER)"
        for name in lost:
            self.broker.mark_lost(name, f"{cause}; its messages were {taken}",
                                  LOST_MARK_TTL_S)
        ages = self.broker.heartbeat_ages_ms(lost, clock.now_ms())  # beaten since? It
        lost = [name for name, age in ages.items()  # reads the mark and leaves
                if age is None or age >= lost_ms]
        for consumer in lost:
            done = hand_back(self.broker, consumer, self.queues, {}, cause, adopters)
            logger.warning("worker %s is lost (%s): %s", consumer, cause, done.describe())
            for stream, pairs in done.adopted.get(adopters[0] if adopters else "", {}).items():
                assert self.adopter is not None
                take_adopted(self.broker, self.adopter, stream, dict(pairs))
        return lost


# A worker that comes back after it was declared lost: it stops, it does not ack.
#
# A worker paused for longer than `WORKER_LOST_AFTER` (SIGSTOP, a frozen virtual machine,
# a network cut) was declared lost by the leader (`lost_workers.py`), which wrote a mark
# (`keys.lost_mark_key`) and took its messages: they run elsewhere. When it comes back,
# its threads all resume at once, and what it held is no longer its own.
#
# - The monitor reads the mark just after each heartbeat it writes when the one before
#   was late (half of `WORKER_LOST_AFTER` or more: it may have been declared lost), and
#   every `CHECK_EVERY_S` anyway (two hosts' clocks may disagree). Writing the heartbeat
#   first and then reading the mark, while the leader writes the mark first and then reads
#   the heartbeat, one of the two always sees the other.
# - Before a fetch, a task's start and a batch of acks, `confirm()` reads the mark too
#   when the last heartbeat confirmed is that old: after a SIGCONT the monitor may not be
#   the first thread to run. Otherwise it costs no round trip.
#
# Once the mark is found the worker fetches and starts nothing, sends no ack nor task
# record (the acker drops them: `Acker.abandon`), leaves its running tasks where they are
# and exits with `LOST_EXIT`, so that its process manager, or its supervisor, starts it
# again under a fresh start (which clears the mark of its name). Only messages it fetched
# after coming back go back on their queue (`requeue.lua` moves only what is still its own).


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
