"""The leader's watch for lost workers: a whole worker (a host, a container, a
`runtasks` killed with its children) that stopped without a word.

Every worker writes its heartbeat each `STATS_INTERVAL` (`worker:<name>`, field `seen`).
A consumer of the group that holds pending messages, has not read or claimed for
`WORKER_LOST_AFTER` seconds and whose heartbeat is as old (or gone) is declared lost:
its messages are handed back at once (`worker/handback.py`), instead of waiting for
`RESERVATION_TIMEOUT`. Both signs are needed: a worker busy with long tasks reads
nothing for a while but keeps beating, and one just started may not have beaten yet
but has just read.

What it was running is not known here (its supervisor, which knew, is gone too): every
message is taken by the leading worker itself, keeping its place and delivery counter,
so it runs next (a reclaimed run: `steps/reclaimed.py` counts runs that died as a
reclaim after `RESERVATION_TIMEOUT` would). Without a worker to take them, they go back
to their queue unchanged.

Before taking them, the watch writes a mark (`keys.lost_mark_key`) and reads the
heartbeat again: a worker that came back meanwhile (it writes its heartbeat, then reads
the mark: `worker/returning.py`) is left its messages, and leaves on its own. A worker
that comes back later finds the mark: it acks nothing more and exits, so its process
manager (or supervisor) starts it afresh.

A thread beside the scheduler, in the worker that leads (one per site).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from django_taskrunner.conf import get_settings
from django_taskrunner.core import clock
from django_taskrunner.store.errors import REDIS_DOWN
from django_taskrunner.store.streams import Broker
from django_taskrunner.worker.handback import Adopter, all_streams, hand_back, take_adopted

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
        now = clock.now_ms()
        seen = self.broker.last_seen_ms(sorted(silent))
        lost = [name for name, at in seen.items() if at is None or now - at >= lost_ms]
        if not lost:
            return []
        adopters = [] if self.adopter is None else [self.adopter.consumer]
        taken = f"taken by {adopters[0]}" if adopters else "put back on their queue"
        cause = f"no heartbeat for {self.lost_after:g}s or more (WORKER_LOST_AFTER)"
        for name in lost:
            self.broker.mark_lost(name, f"{cause}; its messages were {taken}",
                                  LOST_MARK_TTL_S)
        seen = self.broker.last_seen_ms(lost)  # beaten since? It reads the mark and leaves
        now = clock.now_ms()
        lost = [name for name, at in seen.items() if at is None or now - at >= lost_ms]
        for consumer in lost:
            done = hand_back(self.broker, consumer, self.queues, {}, cause, adopters)
            logger.warning("worker %s is lost (%s): %s", consumer, cause, done.describe())
            for stream, pairs in done.adopted.get(adopters[0] if adopters else "", {}).items():
                assert self.adopter is not None
                take_adopted(self.broker, self.adopter, stream, dict(pairs))
        return lost
