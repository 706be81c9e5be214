"""The worker's monitor thread: every STATS_INTERVAL seconds it

1. writes the figures the executor recorded, and this worker's heartbeat, in one pipeline;
2. if the pool is autoscaled or LONG_QUEUE_HOOK is set, reads the figures of the
   worker's queues (`stats.get_stats`), resizes the pool (`pool.decide`) and checks
   the long-queue hook.

Resizing goes through `Pool.resize`, whose retiring threads finish their current task
first: a shrink never interrupts a running task.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Protocol

from django_taskrunner.conf import get_settings
from django_taskrunner.core import clock
from django_taskrunner.stats import recorder as stats_writes
from django_taskrunner.stats.figures import LongQueueHook, QueueStats, get_stats
from django_taskrunner.stats.recorder import Batch, StatsRecorder
from django_taskrunner.store.errors import REDIS_DOWN
from django_taskrunner.store.streams import Broker
from django_taskrunner.worker.lost_workers import ReturnGuard
from django_taskrunner.worker.outage import RedisStatus, redis_call
from django_taskrunner.worker.pool import Pool, decide
from django_taskrunner.worker.running import Attempt
from django_taskrunner.worker.settings import WorkerSettings

logger = logging.getLogger(__name__)


class Monitored(Protocol):
    """What the monitor reads of its worker (the `Worker`, which starts the monitor)."""

    broker: Broker
    consumer: str
    queues: list[str]
    pool: Pool
    stopping: threading.Event
    status: RedisStatus
    returning: ReturnGuard


class Monitor(threading.Thread):
    """Flushes statistics, keeps the heartbeat, autoscales the pool, fires the hook."""

    def __init__(
        self, worker: Monitored, worker_settings: WorkerSettings, *,
        now: Callable[[], float] = clock.monotonic,
    ) -> None:
        super().__init__(name="taskrunner-monitor", daemon=True)
        settings = get_settings()  # the long-queue hook's own settings
        self.worker = worker
        self.window = worker_settings.stats_window
        self.recorder = StatsRecorder(window=self.window)  # the executor records into it
        self.scaling = worker_settings.scaling
        self.now = now  # the autoscaler's clock; tests may pass their own
        self.interval = worker_settings.stats_interval
        self.ttl = stats_writes.heartbeat_ttl(self.interval)
        self.max_workers = worker_settings.max_workers
        self.long_queue = LongQueueHook(
            settings.LONG_QUEUE_HOOK, threshold=settings.LONG_QUEUE_THRESHOLD,
            cooldown=settings.LONG_QUEUE_COOLDOWN, gates=worker.broker.store.stats,
            holder=worker.consumer,
        ) if settings.LONG_QUEUE_HOOK else None
        self.last_change: float | None = None
        self.started_ms = clock.now_ms()
        self._stop_event = threading.Event()

    def run(self) -> None:
        if self.scaling is not None:
            logger.info("autoscale: pool of %d to %d threads, desired wait %.2fs +/- %.2fs, "
                        "cooldown %.1fs", self.scaling.min_workers, self.scaling.max_workers,
                        self.scaling.desired_wait, self.scaling.tolerance, self.scaling.cooldown)
        while not self._stop_event.wait(self.interval):
            try:
                self.tick()
            except Exception:  # the monitor must outlive any surprise
                logger.exception("monitor: tick failed")

    def tick(self) -> None:
        """One round: flush, then tune and check the hook if either is on."""
        if not self.flush() or (self.scaling is None and self.long_queue is None):
            return
        broker = self.worker.broker
        figures = redis_call(
            lambda: [get_stats(queue, tasks=False, broker=broker) for queue in self.worker.queues],
            status=self.worker.status, doing="reading the queues' figures")
        if figures is None:
            return
        if self.long_queue is not None:
            self.long_queue.check(figures)
        if self.scaling is not None and not self.worker.stopping.is_set():
            self.tune(figures)

    def flush(self) -> bool:
        """Write the recorded figures and the heartbeat; False if Redis is unreachable."""
        batch = self.recorder.drain()
        pool, broker = self.worker.pool, self.worker.broker
        heartbeat = stats_writes.WorkerReport(
            consumer=self.worker.consumer, queues=self.worker.queues, threads=pool.size,
            busy=len(pool.running_items()),
            min_workers=self.scaling.min_workers if self.scaling else None,
            max_workers=self.max_workers, started_ms=self.started_ms,
            running=running_field(self.worker.running.snapshot()),
        )
        written = redis_call(lambda: self._write(broker, batch, heartbeat),
                             status=self.worker.status, writes=True,
                             doing="writing statistics (kept until it is back)")
        if written is None:
            self.recorder.restore(batch)
            return False
        self.worker.returning.beaten()  # then read the lost mark, if this beat came late
        return True

    def _write(self, broker: Broker, batch: Batch, heartbeat: stats_writes.WorkerReport) -> bool:
        """The figures and the heartbeat in one pipelined round trip."""
        stats_writes.flush_figures(broker.store.stats, batch, heartbeat, now_ms=clock.now_ms(),
                          window=self.window, ttl=self.ttl)
        return True

    def tune(self, figures: list[QueueStats]) -> int | None:
        """Resize the pool if the longest predicted wait of our queues calls for it."""
        assert self.scaling is not None
        known = [stats for stats in figures if stats.predicted_wait is not None]
        worst = max(known, key=lambda stats: stats.predicted_wait or 0.0, default=None)
        size, now = self.worker.pool.size, self.now()
        wanted = decide(self.scaling, size, worst.predicted_wait if worst else None,
                        last_change=self.last_change, now=now)
        if wanted is None or worst is None:
            return None
        logger.info(
            "autoscale: pool %s from %d to %d threads: queue=%s predicted_wait=%.2fs "
            "(length=%d x average=%s / threads=%d) desired=%.2fs +/- %.2fs",
            "grows" if wanted > size else "shrinks", size, wanted, worst.queue,
            worst.predicted_wait, worst.length,
            "-" if worst.average is None else f"{worst.average:.4f}s", worst.threads,
            self.scaling.desired_wait, self.scaling.tolerance,
        )
        self.worker.pool.resize(wanted)
        self.last_change = now
        return wanted

    def stop(self) -> None:
        """End the loop, write what is left and withdraw the heartbeat."""
        self._stop_event.set()
        if self.is_alive():
            self.join()
        broker = self.worker.broker
        try:
            self.flush()
            broker.store.stats.remove_heartbeat(self.worker.consumer, self.worker.queues)
        except REDIS_DOWN as exc:
            logger.warning("monitor: could not write the last statistics (%s)", exc)
        except Exception:  # statistics must never turn a clean stop into a crash
            logger.exception("monitor: could not write the last statistics")


def running_field(attempts: list[Attempt]) -> str:
    """The heartbeat's `running` field: the running tasks (the first RUNNING_SHOWN)."""
    return json.dumps([[attempt.message.id, attempt.task.name, attempt.message.queue,
                        attempt.started_ms]
                       for attempt in attempts[:stats_writes.RUNNING_SHOWN]])


# The worker's watch over its own threads: each must live until the worker stops.
#
# A fetcher, the acker, the heartbeat, the monitor... catch what they expect (outages,
# bad data) and go on. One that ends by any other exception is a bug; left dead, it
# would leave a worker that seems alive but, say, runs tasks it can no longer ack. So
# its death is noted here, and the worker stops and exits with `THREAD_DIED_EXIT`, for
# its supervisor to start a whole worker again.


# The exit code of a worker one of whose threads died (EX_SOFTWARE).
THREAD_DIED_EXIT = 70


class ThreadWatch:
    """Notes which of the watched threads ended by an exception."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._died: list[str] = []
        self._told = False

    def watch(self, threads: Iterable[threading.Thread]) -> None:
        """Watch `threads` (before they start): their `run` notes an exception's exit."""
        for thread in threads:
            thread.run = self._watched(thread.run, thread.name)  # type: ignore[method-assign]

    def died(self) -> bool:
        """True once a watched thread died (logged the first time)."""
        with self._lock:
            dead, told, self._told = self._died[:1], self._told, self._told or bool(self._died)
        if dead and not told:
            logger.critical("internal thread %s died unexpectedly (its traceback is above); "
                            "stopping this worker with exit code %d so that its supervisor "
                            "starts it again", dead[0], THREAD_DIED_EXIT)
        return bool(dead)

    def _watched(self, run: Callable[[], None], name: str) -> Callable[[], None]:
        """`run`, noting `name` when it ends by an exception (raised on, so that its
        traceback is logged as any thread's)."""
        def watched() -> None:
            try:
                run()
            except BaseException:
                with self._lock:
                    self._died.append(name)
                raise

        return watched
