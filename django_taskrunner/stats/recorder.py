"""In-memory task figures of one worker (the only statistics code on the task hot path),
and how the monitor writes them with the worker's heartbeat (below).

The executor calls `picked_up()` as it starts a message, `ran()` after each attempt and
`succeeded()` / `retried()` / `failed()` once the outcome is known; each is a few
additions under one lock, with no Redis round trip. The worker's monitor thread takes
everything gathered so far with `drain()` every `STATS_INTERVAL` seconds and writes it to
Redis in one round trip (`stats/recorder.py`, `store/stats.py`).
"""

from __future__ import annotations

import bisect
import os
import socket
import threading
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django_taskrunner.core import clock
from django_taskrunner.store import keys
from django_taskrunner.store.stats import QueueWrite, StatsStore, WorkerBeat

# Upper bounds (seconds) of the run-time histogram buckets; one more bucket is +Inf.
RUN_TIME_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
)
BUCKET_LABELS: tuple[str, ...] = (*(f"{bound:g}" for bound in RUN_TIME_BUCKETS), "+Inf")

# Upper bounds (seconds) of the pickup-delay histogram buckets (a message can wait far
# longer than a task runs); one more bucket is +Inf.
PICKUP_BUCKETS: tuple[float, ...] = (*RUN_TIME_BUCKETS, 900.0, 3600.0)
PICKUP_LABELS: tuple[str, ...] = (*(f"{bound:g}" for bound in PICKUP_BUCKETS), "+Inf")


@dataclass
class TaskFigures:
    """What one task of one queue did since the last drain."""

    runs: int = 0  # attempts that ran (whatever their outcome)
    errors: int = 0  # attempts that raised
    succeeded: int = 0
    retried: int = 0
    failed: int = 0  # failed for good, or refused before running (undecodable, expired...)
    run_us: int = 0  # total run time of the attempts, microseconds
    buckets: list[int] = field(default_factory=lambda: [0] * len(BUCKET_LABELS))
    samples: deque[int] = field(default_factory=deque)  # recent run times, microseconds
    pickups: int = 0  # first deliveries started (see `StatsRecorder.picked_up`)
    pickup_us: int = 0  # their total pickup delay, microseconds
    pickup_buckets: list[int] = field(default_factory=lambda: [0] * len(PICKUP_LABELS))

    def add(self, other: TaskFigures) -> None:
        """Fold in `other`, figures recorded after these (its samples are the newer)."""
        self.runs += other.runs
        self.errors += other.errors
        self.succeeded += other.succeeded
        self.retried += other.retried
        self.failed += other.failed
        self.run_us += other.run_us
        self.buckets = [a + b for a, b in zip(self.buckets, other.buckets, strict=True)]
        self.samples.extend(other.samples)
        self.pickups += other.pickups
        self.pickup_us += other.pickup_us
        self.pickup_buckets = [a + b for a, b in zip(self.pickup_buckets, other.pickup_buckets,
                                                     strict=True)]


# (queue, task name) -> figures
Batch = dict[tuple[str, str], TaskFigures]


class StatsRecorder:
    """Thread-safe counters and recent run times, per (queue, task name)."""

    def __init__(self, window: int = 200) -> None:
        self.window = window
        self._lock = threading.Lock()
        self._figures: Batch = {}

    def _entry(self, queue: str, task_name: str) -> TaskFigures:
        entry = self._figures.get((queue, task_name))
        if entry is None:
            entry = self._figures[(queue, task_name)] = TaskFigures(
                samples=deque(maxlen=self.window))
        return entry

    def ran(self, queue: str, task_name: str, seconds: float, error: BaseException | None) -> None:
        """One attempt ran for `seconds`; `error` is what it raised, if anything."""
        micros = round(seconds * 1_000_000)
        bucket = bisect.bisect_left(RUN_TIME_BUCKETS, seconds)
        with self._lock:
            entry = self._entry(queue, task_name)
            entry.runs += 1
            entry.errors += error is not None
            entry.run_us += micros
            entry.buckets[bucket] += 1
            entry.samples.append(micros)

    def picked_up(self, queue: str, task_name: str, stream_id: str | None,
                  runs: int | None = None) -> None:
        """A worker starts a message: record how long it waited since it became available,
        that is since its entry was added to the stream (the millisecond part of its id:
        the dispatch, or the move of a due delayed task or retry). Never negative: the id
        is Redis's clock, the start this host's.

        Only first deliveries count (`runs` is None): a reclaimed message's wait includes
        the dead worker's time, which says nothing about the queue keeping up.
        """
        if runs is not None or not stream_id:
            return
        added_ms = stream_id.partition("-")[0]
        if not added_ms.isdigit():
            return
        waited_ms = clock.now_ms() - int(added_ms)
        seconds = waited_ms / 1000 if waited_ms > 0 else 0.0
        bucket = bisect.bisect_left(PICKUP_BUCKETS, seconds)
        with self._lock:
            entry = self._entry(queue, task_name)
            entry.pickups += 1
            entry.pickup_us += waited_ms * 1000 if waited_ms > 0 else 0
            entry.pickup_buckets[bucket] += 1

    def succeeded(self, queue: str, task_name: str) -> None:
        with self._lock:
            self._entry(queue, task_name).succeeded += 1

    def retried(self, queue: str, task_name: str) -> None:
        with self._lock:
            self._entry(queue, task_name).retried += 1

    def failed(self, queue: str, task_name: str) -> None:
        with self._lock:
            self._entry(queue, task_name).failed += 1

    def drain(self) -> Batch:
        """Everything recorded since the last drain; the recorder starts afresh."""
        with self._lock:
            batch, self._figures = self._figures, {}
        return batch

    def restore(self, batch: Batch) -> None:
        """Put back a drained batch that could not be written (Redis was down)."""
        with self._lock:
            for (queue, task_name), figures in batch.items():
                newer = self._figures.get((queue, task_name))
                if newer is not None:
                    figures.add(newer)
                figures.samples = deque(figures.samples, maxlen=self.window)
                self._figures[(queue, task_name)] = figures


# A worker's figures and heartbeat as the statistics keys hold them (written in one
# round trip by `store.stats.StatsStore`).
#
# Per queue (all keys carry the queue's hash tag):
#
# - `stats` hash: totals `runs errors succeeded retried failed run_us pickups pickup_us`,
#   the same per task as `task:<name>:<field>`, the task's run-time histogram as
#   `task:<name>:le:<bound>`, and the queue's pickup-delay histogram (how long messages
#   waited before a worker started them) as `pickup:le:<bound>`;
# - `window` and `window:<task>` lists: the latest `STATS_WINDOW` run times (microseconds,
#   newest first), for moving averages and p95 shared by every worker;
# - `minute:<epoch minute>` hashes: `succeeded failed retried` per minute, kept two hours
#   (the admin's "last hour" chart);
# - `workers` sorted set: the workers consuming the queue, scored by when their heartbeat
#   expires.
#
# Per worker, `worker:<consumer>` is a hash (pool size, busy threads, queues...) whose TTL
# is refreshed at every write: a worker that died stops counting once it expires.

__all__ = ["COUNTERS", "WorkerReport", "flush_figures", "heartbeat_ttl", "queue_writes",
           "worker_beat", "write"]
COUNTERS = ("runs", "errors", "succeeded", "retried", "failed", "run_us", "pickups",
            "pickup_us")


RUNNING_SHOWN = 20


def heartbeat_ttl(interval: float) -> float:
    """Seconds a heartbeat lives: several missed writes before a worker counts as gone."""
    return max(10.0, 5 * interval)


@dataclass(frozen=True)
class WorkerReport:
    """What a worker tells about itself at every write."""

    consumer: str
    queues: Sequence[str]
    threads: int  # pool size now
    busy: int  # threads running a task now
    min_workers: int | None
    max_workers: int
    started_ms: int
    # Its running tasks, JSON [[task id, task name, queue, started epoch ms], ...], at
    # most `RUNNING_SHOWN` (the admin's Workers page).
    running: str = "[]"

    def fields(self, now_ms: int) -> dict[str, str]:
        return {
            "running": self.running,
            "queues": ",".join(self.queues), "threads": str(self.threads),
            "busy": str(self.busy), "min": "" if self.min_workers is None else str(
                self.min_workers), "max": str(self.max_workers),
            "host": socket.gethostname(), "pid": str(os.getpid()),
            "started": str(self.started_ms), "seen": str(now_ms),
        }


def write(
    pipe: Any, stats: StatsStore, batch: Batch, heartbeat: WorkerReport, *, now_ms: int,
    window: int, ttl: float,
) -> None:
    """Queue on `pipe` the commands that add `batch` and refresh `heartbeat`
    (`StatsStore.write_figures`); the caller executes the pipeline."""
    # The pipeline is the caller's: the store only queues commands on it.
    stats.write_figures(
        queue_writes(batch), worker_beat(heartbeat, now_ms), now_ms=now_ms, window=window,
        ttl=ttl, pipe=pipe)


def flush_figures(stats: StatsStore, batch: Batch, heartbeat: WorkerReport, *, now_ms: int,
                  window: int, ttl: float) -> None:
    """Add `batch` and refresh `heartbeat` in one round trip (what the monitor writes)."""
    stats.write_figures(queue_writes(batch), worker_beat(heartbeat, now_ms), now_ms=now_ms,
                        window=window, ttl=ttl)


def add_figures(stats: StatsStore, batch: Batch, *, now_ms: int, window: int) -> None:
    """Add `batch` alone, no heartbeat (a process that settled another's attempts)."""
    stats.add_figures(queue_writes(batch), now_ms=now_ms, window=window)


def worker_beat(heartbeat: WorkerReport, now_ms: int) -> WorkerBeat:
    """The heartbeat as the store writes it."""
    return WorkerBeat(consumer=heartbeat.consumer, queues=heartbeat.queues,
                      fields=heartbeat.fields(now_ms))


def queue_writes(batch: Batch) -> list[QueueWrite]:
    """The stats-hash increments and run-time windows of `batch`, per queue."""
    by_queue: dict[str, dict[str, TaskFigures]] = defaultdict(dict)
    for (source, task_name), figures in batch.items():
        # Figures describe the whole queue: the shards a task ran from are added up.
        tasks = by_queue[keys.queue_of(source)]
        if task_name in tasks:
            tasks[task_name].add(figures)
        else:
            tasks[task_name] = figures
    return [_queue_write(queue, tasks) for queue, tasks in by_queue.items()]


def _queue_write(queue: str, tasks: dict[str, TaskFigures]) -> QueueWrite:
    increments: list[tuple[str, int]] = []
    windows: list[tuple[str | None, list[int]]] = []
    totals = TaskFigures()  # the queue's figures: every task's added up
    for task_name, figures in tasks.items():
        increments += _counters(f"task:{task_name}:", figures)
        increments += [(f"task:{task_name}:le:{label}", count) for label, count
                       in zip(BUCKET_LABELS, figures.buckets, strict=True) if count]
        windows.append((task_name, list(figures.samples)))
        totals.add(figures)
    increments += _counters("", totals)
    increments += [(f"pickup:le:{label}", count) for label, count
                   in zip(PICKUP_LABELS, totals.pickup_buckets, strict=True) if count]
    windows.append((None, list(totals.samples)))
    return QueueWrite(queue=queue, increments=increments, windows=windows, outcomes={
        "succeeded": totals.succeeded, "failed": totals.failed, "retried": totals.retried})


def _counters(field_prefix: str, figures: TaskFigures) -> list[tuple[str, int]]:
    return [(field_prefix + name, getattr(figures, name)) for name in COUNTERS
            if getattr(figures, name)]
