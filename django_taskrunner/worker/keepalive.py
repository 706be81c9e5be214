"""Heartbeats: while tasks run, keep their messages reserved for this worker.

A message un-acked for longer than its reservation timeout may be reclaimed by another
worker; the heartbeat resets the idle time of every running message (XCLAIM ... JUSTID
by its own consumer, through `store/lua/hold.lua`, which never steals a message another
worker has reclaimed), all queues in one pipelined round trip, several times per
timeout. A 10-minute task with a 30-second reservation timeout is therefore never
reclaimed while its worker lives; if the worker dies, the heartbeats stop with it.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict

from django_taskrunner.store.broker import Broker
from django_taskrunner.worker.outage import REDIS_DOWN, RedisStatus
from django_taskrunner.worker.running import Attempt, RunningSet

logger = logging.getLogger(__name__)

BEATS_PER_TIMEOUT = 4
MIN_INTERVAL = 0.05
MAX_INTERVAL = 10.0


def heartbeat_interval(reservation_timeout: float) -> float:
    """Seconds between heartbeats: well under the timeout, never busy, never rare."""
    return min(MAX_INTERVAL, max(MIN_INTERVAL, reservation_timeout / BEATS_PER_TIMEOUT))


class Heartbeat(threading.Thread):
    """Beats for every running attempt, every `heartbeat_interval` of the shortest timeout."""

    def __init__(
        self, broker: Broker, consumer: str, running: RunningSet, reservation_timeout: float,
        status: RedisStatus,
    ) -> None:
        super().__init__(name="taskrunner-heartbeat", daemon=True)
        self.broker = broker
        self.consumer = consumer
        self.running = running
        self.reservation_timeout = reservation_timeout
        self.status = status
        self._stop_event = threading.Event()
        self._lost: set[tuple[str, str]] = set()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval()):
            self.beat()

    def interval(self) -> float:
        timeouts = [attempt.reservation_timeout for attempt in self.running.snapshot()]
        return heartbeat_interval(min([self.reservation_timeout, *timeouts]))

    def beat(self) -> None:
        """One pipelined heartbeat for all running attempts; never raises."""
        by_queue: dict[str, list[Attempt]] = defaultdict(list)
        for attempt in self.running.snapshot():
            by_queue[attempt.queue].append(attempt)
        if not by_queue:
            return
        pipe = self.broker.client.pipeline(transaction=False)
        for queue, attempts in by_queue.items():
            self.broker.hold(queue, self.consumer, [a.stream_id for a in attempts], pipe=pipe)
        try:
            results = pipe.execute()
        except REDIS_DOWN as exc:
            self.status.failed(exc, "sending heartbeats")
            return
        except Exception:
            logger.exception("heartbeat failed; trying again in %.1fs", self.interval())
            return
        self.status.succeeded()
        self._lost &= {(a.queue, a.stream_id) for attempts in by_queue.values() for a in attempts}
        for queue, lost_ids in zip(by_queue, results, strict=True):
            for stream_id in lost_ids:
                self._report_lost(queue, stream_id.decode() if isinstance(stream_id, bytes)
                                  else stream_id)

    def _report_lost(self, queue: str, stream_id: str) -> None:
        """Warn once per running message that another worker took it over."""
        if (queue, stream_id) in self._lost:
            return
        self._lost.add((queue, stream_id))
        logger.warning("message %s of queue %s is running here but another worker reclaimed "
                       "it (this worker was stalled past the reservation timeout?); it may "
                       "run twice", stream_id, queue)

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join()
