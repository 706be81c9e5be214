"""In-memory task figures of one worker: the only statistics code on the task hot path.

The executor calls `picked_up()` as it starts a message, `ran()` after each attempt and
`succeeded()` / `retried()` / `failed()` once the outcome is known; each is a few
additions under one lock, with no Redis round trip. The worker's monitor thread takes
everything gathered so far with `drain()` every `STATS_INTERVAL` seconds and writes it to
Redis in one round trip (`stats/writes.py`, `store/stats.py`).
"""

from __future__ import annotations

import bisect
import threading
from collections import deque
from dataclasses import dataclass, field

from django_taskrunner.core import clock

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
