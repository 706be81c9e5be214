"""The "running" record of each attempt, written before the task's own code runs.

`lookup(id)` of a started task must say "running" (and which worker) as soon as the
task can ask, also on a busy worker; so the thread that starts an attempt writes its
record before it calls the function. To keep that cheap, threads that start together
share one round trip (a group commit): a thread hands its write in, and if no write is
being sent it sends every write waiting (one `record_write.lua` call for them all);
otherwise it waits for the write in flight to end and then either finds its own sent
with the next one or sends the next batch itself. One thread alone pays one round trip
per task; eight busy threads share them.

An `async def` attempt starts on the event loop, which must not block on Redis: its
write is handed to the heartbeat thread, which sends it at once (`Heartbeat`).

A write that fails (Redis is down, the call timed out) is left to the heartbeat, which
writes "running" with its next beat as it always did; the task runs all the same.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from django_taskrunner.store.errors import REDIS_DOWN
from django_taskrunner.store.records import Records
from django_taskrunner.worker.outage import RedisStatus
from django_taskrunner.worker.running import Attempt
from django_taskrunner.worker.steps.record import started_write

logger = logging.getLogger(__name__)


class StartWrites:
    """Writes attempts' "running" records, batching the threads that start together."""

    def __init__(self, records: Records, consumer: str, status: RedisStatus) -> None:
        self.records = records
        self.consumer = consumer
        self.status = status
        self._cond = threading.Condition()
        self._waiting: list[Attempt] = []
        self._handed = 0  # attempts handed in so far
        self._done = 0  # attempts whose write was sent (or failed), in the order handed
        self._sending = False

    def write(self, attempts: Sequence[Attempt]) -> None:
        """Return once the records of `attempts` were written (or the write failed),
        sending them, with any others waiting, unless a thread sending now takes them."""
        with self._cond:
            self._waiting.extend(attempts)
            self._handed += len(attempts)
            mine = self._handed
            while self._sending:
                self._cond.wait()
            if self._done >= mine:
                return  # the batch just sent held them
            batch, self._waiting = self._waiting, []
            self._sending = True
        try:
            self._send(batch)
        finally:
            with self._cond:
                self._done += len(batch)
                self._sending = False
                self._cond.notify_all()

    def _send(self, batch: list[Attempt]) -> None:
        """One round trip for the whole batch; never raises."""
        writes = [started_write(attempt, self.consumer) for attempt in batch]
        try:
            self.records.write(writes)
        except REDIS_DOWN as exc:
            self.status.failed(exc, "writing the records of started tasks")
            return
        except Exception:
            logger.exception("could not write the records of %d started tasks; the "
                             "heartbeat writes them", len(batch))
            return
        self.status.succeeded()
        for attempt in batch:
            attempt.start_recorded = True
