"""A worker's figures and heartbeat as the statistics keys hold them (written in one
round trip by `store.stats.StatsStore`).

Per queue (all keys carry the queue's hash tag):

- `stats` hash: totals `runs errors succeeded retried failed run_us pickups pickup_us`,
  the same per task as `task:<name>:<field>`, the task's run-time histogram as
  `task:<name>:le:<bound>`, and the queue's pickup-delay histogram (how long messages
  waited before a worker started them) as `pickup:le:<bound>`;
- `window` and `window:<task>` lists: the latest `STATS_WINDOW` run times (microseconds,
  newest first), for moving averages and p95 shared by every worker;
- `minute:<epoch minute>` hashes: `succeeded failed retried` per minute, kept two hours
  (the admin's "last hour" chart);
- `workers` sorted set: the workers consuming the queue, scored by when their heartbeat
  expires.

Per worker, `worker:<consumer>` is a hash (pool size, busy threads, queues...) whose TTL
is refreshed at every write: a worker that died stops counting once it expires.
"""

from __future__ import annotations

import os
import socket
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django_taskrunner.stats.recorder import BUCKET_LABELS, PICKUP_LABELS, Batch, TaskFigures
from django_taskrunner.store import keys
from django_taskrunner.store.stats import QueueWrite, StatsStore, WorkerBeat

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

