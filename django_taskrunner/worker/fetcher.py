"""Fetchers: one thread per stream that reads new messages into the worker's buffer."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from django_taskrunner.worker.outage import redis_call

if TYPE_CHECKING:
    from django_taskrunner.worker.worker import Worker

T = TypeVar("T")


class Fetcher(threading.Thread):
    """Reads one stream (a queue, or one shard of it) into the worker's buffer while there
    is room; `queue` is then the shard name, which the executor and acker use as is."""

    def __init__(self, worker: Worker, queue: str) -> None:
        super().__init__(name=f"taskrunner-fetch-{queue}", daemon=True)
        self.worker = worker
        self.queue = queue
        # Burst mode: the worker's generation seen when a read found the stream empty.
        self.idle_at: tuple[int, int, int] | None = None

    def run(self) -> None:
        worker, broker = self.worker, self.worker.broker
        self._with_retries(lambda: broker.ensure_group(self.queue))
        reclaimer = worker.reclaimer
        # Messages this consumer name held before a restart come first.
        while not worker.stopping.is_set() and self._with_retries(
                lambda: reclaimer.take_back_own(self.queue, worker.wait_for_room())):
            pass
        while not worker.stopping.is_set():
            room = worker.wait_for_room()
            if room > 0:  # messages of dead workers go before new ones
                room -= reclaimer.reclaim_due(self.queue, room)
            if room <= 0:
                continue
            generation = worker.generation()
            count = min(room, worker.settings.batch_size)
            block = None if worker.settings.burst else worker.settings.block_ms
            read = self._with_retries(
                lambda: broker.read_checked(self.queue, worker.consumer, count,  # noqa: B023
                                            block))  # noqa: B023
            entries = None if read is None else read[0]
            if read is not None:  # the ids cancelled on this stream, as of this read
                worker.executor.cancelled[self.queue] = read[1]
            if entries:
                self.idle_at = None
                worker.accept(self.queue, entries)
            elif entries is not None and worker.settings.burst:
                self.idle_at = generation
                worker.wait_for_change(0.05)

    def _with_retries(self, call: Callable[[], T]) -> T | None:
        """Run `call`, retrying with capped backoff while Redis is down; None if stopping."""
        stopping = self.worker.stopping
        return redis_call(call, status=self.worker.status, doing=f"reading queue {self.queue}",
                          wait=lambda seconds, _failures: stopping.wait(seconds))
