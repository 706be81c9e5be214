"""A worker's side of paused queues (`pause_queue`, docs/flow-control.md): it looks at
the paused set every `PAUSE_POLL_S`, its fetchers read nothing of a paused queue, and a
message of one read just before the pause was seen goes back on its stream unchanged
instead of starting (through the acker, as at shutdown: nothing lost, no attempt
counted). Running tasks, delayed moves and dispatch are not touched.

Redis down: the last known set holds. The paused key of the wrong type: read as nothing
paused (logged once), so a stray key never stops a worker.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from django_taskrunner.store import keys
from django_taskrunner.store.errors import REDIS_DOWN, REPLY_ERROR

if TYPE_CHECKING:
    from django_taskrunner.worker.fetcher import Delivery
    from django_taskrunner.worker.worker import Worker

logger = logging.getLogger(__name__)

PAUSE_POLL_S = 0.25  # a pause is seen within this (plus one round trip)


class PauseWatch(threading.Thread):
    """Keeps `paused` (queue names) up to date for the worker's fetchers and pool."""

    def __init__(self, worker: Worker) -> None:
        super().__init__(name="taskrunner-pauses", daemon=True)
        self.worker = worker
        self.store = worker.broker.store.pauses
        self.paused: frozenset[str] = frozenset()
        self._unreadable_logged = False

    def run(self) -> None:
        while not self.worker.stopping.wait(PAUSE_POLL_S):
            self.poll()

    def poll(self) -> None:
        """Read the paused set once; log what changed."""
        try:
            paused = frozenset(self.store.paused())
        except REDIS_DOWN:
            return
        except REPLY_ERROR as exc:
            if not self._unreadable_logged:
                logger.error("the paused queues cannot be read (%s): no queue is held", exc)
                self._unreadable_logged = True
            paused = frozenset()
        mine = set(self.worker.queues)
        for queue in sorted((paused - self.paused) & mine):
            logger.info("queue %s is paused: no new task of it starts here", queue)
        for queue in sorted((self.paused - paused) & mine):
            logger.info("queue %s is resumed", queue)
        self.paused = paused

    def holds(self, stream: str) -> bool:
        """Whether the queue of `stream` (a queue, shard or level) is paused."""
        return keys.queue_of(stream) in self.paused

    def sends_back(self, item: Delivery) -> bool:
        """A fetched message of a paused queue: back on its stream, unchanged (True);
        False when it may start."""
        if item.body is None or not self.holds(item.shard):
            return False
        self.worker.acker.requeue(item.shard, item.stream_id, item.body)
        return True
