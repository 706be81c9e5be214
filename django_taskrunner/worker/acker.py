"""The acker: one thread that acks finished messages in batches."""

from __future__ import annotations

import logging
import threading
from collections import defaultdict

from django_taskrunner.store.broker import Broker
from django_taskrunner.store.errors import REDIS_DOWN
from django_taskrunner.worker.outage import RedisStatus, backoff

logger = logging.getLogger(__name__)

# Acks wait at most this long (or until this many finished) to share a round trip.
ACK_LINGER_S = 0.010
ACK_BATCH = 100


class Acker(threading.Thread):
    """Acks finished messages in batches: all that finished meanwhile, one round trip.

    The first ack of a batch wakes the acker, which then lingers `ACK_LINGER_S` to
    collect more (or until `ACK_BATCH` wait): one round trip and one thread switch for
    many tasks instead of one per task, for at most 10 ms of delay.
    """

    def __init__(self, broker: Broker, status: RedisStatus) -> None:
        super().__init__(name="taskrunner-acker", daemon=True)
        self.broker = broker
        self.status = status
        self._waiting: dict[str, list[str]] = defaultdict(list)
        self._count = 0
        self._cond = threading.Condition()
        self._stopping = False

    def add(self, queue: str, stream_id: str) -> None:
        with self._cond:
            self._waiting[queue].append(stream_id)
            self._count += 1
            if self._count == 1 or self._count == ACK_BATCH:
                self._cond.notify()

    def _take(self) -> dict[str, list[str]] | None:
        """The next batch to ack; None once stopping with nothing left."""
        with self._cond:
            while not self._waiting and not self._stopping:
                self._cond.wait()
            if not self._waiting and self._stopping:
                return None
            if self._count < ACK_BATCH and not self._stopping:
                self._cond.wait(ACK_LINGER_S)
            batch, self._waiting, self._count = self._waiting, defaultdict(list), 0
            return batch

    def run(self) -> None:
        failures = 0
        while True:
            batch = self._take()
            if batch is None:
                return
            try:
                self.flush(batch)
                failures = 0
                self.status.succeeded()
            except REDIS_DOWN as exc:
                failures += 1
                self.status.failed(exc, "acking finished tasks")
                with self._cond:
                    for queue, ids in batch.items():
                        self._waiting[queue][:0] = ids
                        self._count += len(ids)
                    self._cond.wait(backoff(failures))
                    if self._stopping and failures > 3:
                        logger.error("giving up on %d acks at exit; those tasks will be "
                                     "delivered again", sum(map(len, self._waiting.values())))
                        return

    def flush(self, batch: dict[str, list[str]]) -> None:
        pipe = self.broker.client.pipeline(transaction=False)
        for queue, ids in batch.items():
            self.broker.ack(queue, ids, pipe=pipe)
        pipe.execute()

    def stop(self) -> None:
        """Ack what is waiting, then end."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self.join()
