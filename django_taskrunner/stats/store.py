"""Writing a worker's figures and heartbeat to Redis: everything in one pipeline.

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

STATS_TTL_SECONDS = 7 * 24 * 3600  # totals of a queue nobody used for a week go away
MINUTE_TTL_SECONDS = 2 * 3600
COUNTERS = ("runs", "errors", "succeeded", "retried", "failed", "run_us", "pickups",
            "pickup_us")


def heartbeat_ttl(interval: float) -> float:
    """Seconds a heartbeat lives: several missed writes before a worker counts as gone."""
    return max(10.0, 5 * interval)


@dataclass(frozen=True)
class Heartbeat:
    """What a worker tells about itself at every write."""

    consumer: str
    queues: Sequence[str]
    threads: int  # pool size now
    busy: int  # threads running a task now
    min_workers: int | None
    max_workers: int
    started_ms: int

    def fields(self, now_ms: int) -> dict[str, str]:
        return {
            "queues": ",".join(self.queues), "threads": str(self.threads),
            "busy": str(self.busy), "min": "" if self.min_workers is None else str(
                self.min_workers), "max": str(self.max_workers),
            "host": socket.gethostname(), "pid": str(os.getpid()),
            "started": str(self.started_ms), "seen": str(now_ms),
        }


def write(
    pipe: Any, prefix: str, batch: Batch, heartbeat: Heartbeat, *, now_ms: int, window: int,
    ttl: float,
) -> None:
    """Queue on `pipe` the commands that add `batch` and refresh `heartbeat`."""
    by_queue: dict[str, dict[str, TaskFigures]] = defaultdict(dict)
    for (source, task_name), figures in batch.items():
        # Figures describe the whole queue: the shards a task ran from are added up.
        tasks = by_queue[keys.queue_of(source)]
        if task_name in tasks:
            tasks[task_name].add(figures)
        else:
            tasks[task_name] = figures
    for queue, tasks in by_queue.items():
        _write_queue(pipe, prefix, queue, tasks, now_ms=now_ms, window=window)
    _write_heartbeat(pipe, prefix, heartbeat, now_ms=now_ms, ttl=ttl)


def _write_queue(
    pipe: Any, prefix: str, queue: str, tasks: dict[str, TaskFigures], *, now_ms: int,
    window: int,
) -> None:
    stats = keys.stats_key(prefix, queue)
    totals = TaskFigures()  # the queue's figures: every task's added up
    for task_name, figures in tasks.items():
        _add_counters(pipe, stats, f"task:{task_name}:", figures)
        for label, count in zip(BUCKET_LABELS, figures.buckets, strict=True):
            if count:
                pipe.hincrby(stats, f"task:{task_name}:le:{label}", count)
        _push_window(pipe, keys.window_key(prefix, queue, task_name), list(figures.samples),
                     window)
        totals.add(figures)
    _add_counters(pipe, stats, "", totals)
    for label, count in zip(PICKUP_LABELS, totals.pickup_buckets, strict=True):
        if count:
            pipe.hincrby(stats, f"pickup:le:{label}", count)
    pipe.expire(stats, STATS_TTL_SECONDS)
    _push_window(pipe, keys.window_key(prefix, queue), list(totals.samples), window)
    outcomes = {"succeeded": totals.succeeded, "failed": totals.failed,
                "retried": totals.retried}
    if any(outcomes.values()):
        minute = keys.minute_key(prefix, queue, now_ms // 60_000)
        for name, count in outcomes.items():
            if count:
                pipe.hincrby(minute, name, count)
        pipe.expire(minute, MINUTE_TTL_SECONDS)


def _add_counters(pipe: Any, key: str, field_prefix: str, figures: TaskFigures) -> None:
    for name in COUNTERS:
        value = getattr(figures, name)
        if value:
            pipe.hincrby(key, field_prefix + name, value)


def _push_window(pipe: Any, key: str, samples: list[int], window: int) -> None:
    """Newest first: LPUSH puts its last argument at the head."""
    if not samples:
        return
    pipe.lpush(key, *samples[-window:])
    pipe.ltrim(key, 0, window - 1)
    pipe.expire(key, STATS_TTL_SECONDS)


def _write_heartbeat(pipe: Any, prefix: str, heartbeat: Heartbeat, *, now_ms: int,
                     ttl: float) -> None:
    worker = keys.worker_key(prefix, heartbeat.consumer)
    pipe.hset(worker, mapping=heartbeat.fields(now_ms))
    pipe.expire(worker, max(1, round(ttl)))
    expires_ms = now_ms + round(ttl * 1000)
    for queue in heartbeat.queues:
        index = keys.queue_workers_key(prefix, queue)
        pipe.zadd(index, {heartbeat.consumer: expires_ms})
        pipe.zremrangebyscore(index, "-inf", now_ms)
        pipe.expire(index, max(1, round(ttl)))


def remove_heartbeat(client: Any, prefix: str, consumer: str, queues: Sequence[str]) -> None:
    """A worker that stops cleanly stops counting at once (no wait for the TTL)."""
    pipe = client.pipeline(transaction=False)
    pipe.delete(keys.worker_key(prefix, consumer))
    for queue in queues:
        pipe.zrem(keys.queue_workers_key(prefix, queue), consumer)
    pipe.execute()
