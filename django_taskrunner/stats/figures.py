"""Reading a queue's figures: `get_stats(queue)`, shared by every worker and the admin;
the queues dashboard's and `taskrunner_stats`' health figures built on them, and the
`LONG_QUEUE_HOOK` they feed (below).

The predicted wait of a task dispatched now is

    predicted_wait = length × average / threads

where `length` is every message ahead of it (waiting to be delivered plus delivered and
not finished), `average` the mean run time of the queue's latest `STATS_WINDOW` attempts,
and `threads` the pool threads of the live workers consuming the queue. It is 0 for an
empty queue, and None when it cannot be known (no run time measured yet, or no live
worker). A worker serving several queues counts its threads for each of them.

The pickup delay is how long a message waited before a worker started it: from when its
entry was added to the stream (the dispatch, or the move of a due delayed task or retry
by the scheduler) to the start, for first deliveries only. It is kept as a histogram
(recorder.PICKUP_LABELS); its p95 is estimated from the histogram, interpolating inside
the bucket, as Prometheus's `histogram_quantile()` does.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from django_taskrunner.conf import get_settings
from django_taskrunner.core import clock, sharding
from django_taskrunner.core.registry import registry
from django_taskrunner.stats.recorder import BUCKET_LABELS, COUNTERS, PICKUP_BUCKETS, PICKUP_LABELS
from django_taskrunner.store import get_store
from django_taskrunner.store.inspect import GroupInfo, Inspector
from django_taskrunner.store.stats import StatsStore
from django_taskrunner.store.streams import Broker


@dataclass(frozen=True)
class TaskStats:
    """Run figures of one task on one queue (all counters are totals since first run)."""

    name: str
    runs: int  # attempts that ran
    errors: int  # attempts that raised
    succeeded: int
    retried: int
    failed: int  # failed for good, or refused before running
    average: float | None  # seconds: mean of the latest STATS_WINDOW attempts
    p95: float | None  # seconds: 95th percentile of those attempts
    overall_average: float | None  # seconds: mean of every attempt so far
    run_seconds: float  # total run time of every attempt so far
    buckets: tuple[int, ...]  # attempts per run-time bucket (recorder.BUCKET_LABELS)
    pickup_average: float | None = None  # seconds: mean pickup delay (module doc), ever


@dataclass(frozen=True)
class QueueStats:
    """The figures of one queue, as `get_stats()` found them."""

    queue: str
    length: int  # messages not finished: waiting + pending
    waiting: int  # not yet delivered to any worker (the group's lag)
    pending: int  # delivered to a worker and not acknowledged
    oldest_wait: float | None  # seconds the oldest waiting message has waited
    workers: int  # live worker processes consuming the queue
    threads: int  # their pool threads
    busy: int  # of which running a task now
    average: float | None  # seconds: mean run time of the queue's latest attempts
    p95: float | None
    throughput: float  # tasks finished (succeeded or failed) per second, last minute
    runs: int
    succeeded: int
    retried: int
    failed: int
    predicted_wait: float | None  # seconds a task dispatched now would wait (module doc)
    tasks: tuple[TaskStats, ...] = ()
    # Where `waiting` comes from: "redis" (the group's lag, XINFO GROUPS, Redis 7+),
    # "computed" (XLEN - pending: exact when acked entries are deleted, or before any
    # worker created the group), "estimate" (XLEN: Redis < 7 keeping acked entries, an
    # upper bound; the lag itself is unknown).
    lag_source: str = "redis"
    # Pickup delay (module doc) of every first delivery so far: how many, their mean and
    # estimated p95 in seconds, and how many fell in each bucket (recorder.PICKUP_LABELS).
    pickups: int = 0
    pickup_average: float | None = None
    pickup_p95: float | None = None
    pickup_buckets: tuple[int, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values."""
        return asdict(self)


@dataclass(frozen=True)
class MinuteCounts:
    """Outcomes of one queue in one minute (`start_ms` is the minute's first millisecond)."""

    start_ms: int
    succeeded: int
    failed: int
    retried: int


def predict_wait(length: int, average: float | None, threads: int) -> float | None:
    """Seconds a task dispatched now waits: `length × average / threads` (module doc)."""
    if length <= 0:
        return 0.0
    if average is None or threads <= 0:
        return None
    return length * average / threads


def percentile(samples: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile (`fraction` 0.95 for p95); None without samples."""
    if not samples:
        return None
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def histogram_quantile(bounds: tuple[float, ...], counts: tuple[int, ...],
                       fraction: float) -> float | None:
    """The `fraction` quantile of a histogram (`counts` per bucket, the last one +Inf),
    interpolated inside its bucket; the highest bound when it falls in +Inf; None if empty."""
    total = sum(counts)
    if not total:
        return None
    rank, seen = fraction * total, 0
    for index, count in enumerate(counts):
        if count and seen + count >= rank:
            if index >= len(bounds):
                return bounds[-1]
            lower = bounds[index - 1] if index else 0.0
            return lower + (bounds[index] - lower) * (rank - seen) / count
        seen += count
    return bounds[-1]


def get_stats(queue: str, *, tasks: bool = True, broker: Broker | None = None,
              now_ms: int | None = None) -> QueueStats:
    """The figures of `queue`, read in two pipelined round trips (`Inspector.read_queue`,
    `Inspector.read_details`).

    `tasks=False` skips the per-task figures (what the autoscaler reads each interval).
    """
    broker = broker or get_store().streams
    inspector = broker.store.inspect
    now_ms = clock.now_ms() if now_ms is None else now_ms
    first = inspector.read_queue(queue, sharding.shards(queue), now_ms)
    if first.levels:  # priorities in use: read their streams too
        first = inspector.read_queue(queue, [*sharding.shards(queue), *first.levels], now_ms)
    streams = [_stream_figures(group, broker.delete_on_ack) for group in first.groups]
    pending = sum(stream.pending for stream in streams)
    waiting = sum(stream.waiting for stream in streams)
    # Every stream's figure is exact only if each is; one estimate makes the sum one.
    lag_source = _combined_source([stream.lag_source for stream in streams])
    totals = first.stats
    task_names = _task_names(totals) if tasks else []
    second = _read_second(inspector, queue, streams, first.live_workers, task_names)
    window = [value / 1e6 for value in first.window]
    average = sum(window) / len(window) if window else None
    threads = sum(threads for threads, _busy in second["workers"])
    length = waiting + pending
    return QueueStats(
        queue=queue, length=length, waiting=waiting, pending=pending,
        oldest_wait=_oldest_wait(second["oldest"], now_ms) if waiting else None,
        workers=len(second["workers"]), threads=threads,
        busy=sum(busy for _threads, busy in second["workers"]),
        average=average, p95=percentile(window, 0.95),
        throughput=_throughput(first.minutes, now_ms),
        runs=_int(totals, "runs"), succeeded=_int(totals, "succeeded"),
        retried=_int(totals, "retried"), failed=_int(totals, "failed"),
        predicted_wait=predict_wait(length, average, threads),
        tasks=tuple(_task_stats(name, totals, second["windows"].get(name, []))
                    for name in task_names),
        lag_source=lag_source,
        **_pickup_figures(totals),
    )


def _pickup_figures(totals: dict[str, str]) -> dict[str, Any]:
    """The queue's pickup-delay figures (`QueueStats.pickup_*`) from its stats hash."""
    pickups = _int(totals, "pickups")
    buckets = tuple(_int(totals, f"pickup:le:{label}") for label in PICKUP_LABELS)
    return {
        "pickups": pickups, "pickup_buckets": buckets,
        "pickup_average": _int(totals, "pickup_us") / pickups / 1e6 if pickups else None,
        "pickup_p95": histogram_quantile(PICKUP_BUCKETS, buckets, 0.95),
    }


@dataclass(frozen=True)
class _StreamFigures:
    """One stream of a queue (the queue's own, or one shard's)."""

    shard: str
    waiting: int
    pending: int
    last_delivered: str
    lag_source: str


def _stream_figures(group: GroupInfo, delete_on_ack: bool) -> _StreamFigures:
    waiting, lag_source = _waiting(group, delete_on_ack)
    return _StreamFigures(shard=group.stream, waiting=waiting, pending=group.pending,
                          lag_source=lag_source, last_delivered=group.last_delivered)


def _combined_source(sources: list[str]) -> str:
    for worst in ("estimate", "computed"):
        if worst in sources:
            return worst
    return "redis"


def _read_second(inspector: Inspector, queue: str, streams: list[_StreamFigures],
                 workers: list[str], task_names: list[str]) -> dict[str, Any]:
    """The first waiting entry of each stream, the live workers' threads and the tasks'
    windows, in one round trip."""
    details = inspector.read_details(
        queue, [(stream.shard, stream.last_delivered) for stream in streams], workers,
        task_names)
    live = [(threads, busy or 0) for threads, busy in details.loads if threads is not None]
    oldest = min((stream_id for stream_id in details.first_waiting if stream_id),
                 key=_id_ms, default=None)
    return {"oldest": oldest, "workers": live,
            "windows": {name: [value / 1e6 for value in values]
                        for name, values in zip(task_names, details.windows, strict=True)}}


def _id_ms(stream_id: str) -> int:
    return int(stream_id.split("-", 1)[0])


def _task_names(totals: dict[str, str]) -> list[str]:
    """Tasks with a counter in the stats hash (`task:<name>:<counter>`)."""
    names = set()
    for field in totals:
        if field.startswith("task:"):
            name, _sep, counter = field[5:].rpartition(":")
            if counter in COUNTERS:
                names.add(name)
    return sorted(names)


def _waiting(group: GroupInfo, delete_on_ack: bool) -> tuple[int, str]:
    """Entries not yet delivered, and where the figure comes from (`QueueStats.lag_source`):
    the group's lag (Redis 7+), else what XLEN implies."""
    if group.lag is not None:
        return group.lag, "redis"
    if not group.found:
        return group.length, "computed"
    # Redis < 7, or a lag Redis cannot compute: with DELETE_ON_ACK the stream holds exactly
    # the waiting and the pending entries.
    if delete_on_ack:
        return max(0, group.length - group.pending), "computed"
    return group.length, "estimate"


def _oldest_wait(stream_id: str | None, now_ms: int) -> float | None:
    if stream_id is None:
        return None
    return max(0.0, (now_ms - _id_ms(stream_id)) / 1000)


def _throughput(minutes: tuple[dict[str, str], dict[str, str]], now_ms: int) -> float:
    """Finished tasks per second over the last 60 s (sliding-window estimate).

    This minute's count plus the previous minute's, weighted by the part of it that is
    still inside the last 60 seconds.
    """
    current, previous = minutes
    done_now = _int(current, "succeeded") + _int(current, "failed")
    done_before = _int(previous, "succeeded") + _int(previous, "failed")
    elapsed = (now_ms % 60_000) / 60_000
    return (done_now + done_before * (1 - elapsed)) / 60


def _task_stats(name: str, totals: dict[str, str], window: list[float]) -> TaskStats:
    field = f"task:{name}:"
    runs, run_us = _int(totals, field + "runs"), _int(totals, field + "run_us")
    pickups = _int(totals, field + "pickups")
    return TaskStats(
        name=name, runs=runs, errors=_int(totals, field + "errors"),
        succeeded=_int(totals, field + "succeeded"), retried=_int(totals, field + "retried"),
        failed=_int(totals, field + "failed"),
        average=sum(window) / len(window) if window else None,
        p95=percentile(window, 0.95),
        overall_average=run_us / runs / 1e6 if runs else None,
        run_seconds=run_us / 1e6,
        buckets=tuple(_int(totals, f"{field}le:{label}") for label in BUCKET_LABELS),
        pickup_average=(_int(totals, field + "pickup_us") / pickups / 1e6 if pickups
                        else None),
    )


def minute_counts(queue: str, minutes: int = 60, *, broker: Broker | None = None,
                  now_ms: int | None = None) -> list[MinuteCounts]:
    """Outcomes per minute over the last `minutes` minutes, oldest first (kept 2 hours);
    one round trip (`Inspector.minute_hashes`)."""
    broker = broker or get_store().streams
    current = (clock.now_ms() if now_ms is None else now_ms) // 60_000
    starts = list(range(current - minutes + 1, current + 1))
    hashes = broker.store.inspect.minute_hashes(queue, starts)
    return [
        MinuteCounts(start_ms=minute * 60_000, succeeded=_int(counts, "succeeded"),
                     failed=_int(counts, "failed"), retried=_int(counts, "retried"))
        for minute, counts in zip(starts, hashes, strict=True)
    ]


def known_queues() -> list[str]:
    """Every queue declared in code and settings: those registered tasks name,
    DEFAULT_QUEUE, and the QUEUES of every Django Tasks backend of ours in TASKS."""
    return sorted(declared_queues())


TASKS_BACKEND = "django_taskrunner.backends.TaskRunnerBackend"


def declared_queues() -> set[str]:
    """The queues code and settings name (see `known_queues`), without asking Redis."""
    queues = registry.queues() | {get_settings().DEFAULT_QUEUE}
    for params in getattr(settings, "TASKS", {}).values():
        if isinstance(params, dict) and params.get("BACKEND") == TASKS_BACKEND:
            queues |= {name for name in params.get("QUEUES", ["default"]) if isinstance(name, str)}
    return queues


def _int(values: dict[str, str], name: str) -> int:
    return int(values.get(name) or 0)


# The figures of the queues dashboard and of `manage.py taskrunner_stats`: each queue's
# `QueueStats` (stats.py) plus its consumer-group lag, its consumers with their idle
# times, its failures of the last hour and its per-minute counts; and the consumer
# group's leader. Both read them here, so both show the same numbers.

MAX_CONSUMERS = 20  # shown per queue: the live ones first, then the most recently active
HOUR_MINUTES = 60


@dataclass(frozen=True)
class ConsumerInfo:
    """One consumer of a queue's group, as XINFO CONSUMERS and its heartbeat tell."""

    name: str
    pending: int  # messages delivered to it and not acknowledged
    idle: float  # seconds since it last read or claimed a message
    inactive: float | None  # seconds since its last successful read (Redis 7.2+), else None
    live: bool  # its worker's heartbeat is fresh
    threads: int | None  # pool threads of its worker, when live
    busy: int | None  # of which running a task now


@dataclass(frozen=True)
class LeaderInfo:
    """Who holds the consumer group's leader lease (runs the scheduler), and for how long."""

    group: str
    holder: str | None  # None: nobody leads (no worker runs the scheduler)
    lease_left: float | None  # seconds until the lease expires unless renewed


@dataclass(frozen=True)
class QueueHealth:
    """Everything the dashboard shows for one queue."""

    stats: QueueStats
    lag: int | None  # messages not yet delivered to the group; None when unknown
    consumers: tuple[ConsumerInfo, ...]  # at most MAX_CONSUMERS
    consumer_count: int  # every consumer the group knows, live or not
    failed_last_hour: int  # tasks that failed for good in the last 60 minutes
    minutes: tuple[MinuteCounts, ...]  # the last 60 minutes, oldest first

    @property
    def queue(self) -> str:
        return self.stats.queue

    def as_dict(self) -> dict[str, Any]:
        """The `QueueStats` figures plus this page's own, as plain JSON-ready values."""
        return {
            **self.stats.as_dict(), "lag": self.lag,
            "failed_last_hour": self.failed_last_hour,
            "consumer_count": self.consumer_count,
            "consumers": [asdict(consumer) for consumer in self.consumers],
            "minutes": [asdict(minute) for minute in self.minutes],
        }


def get_leader(broker: Broker | None = None) -> LeaderInfo:
    """The holder of the group's leader lease (`keys.leader_key`) and its time left."""
    broker = broker or get_store().streams
    holder, ttl_ms = broker.store.inspect.leader()
    return LeaderInfo(group=broker.group, holder=holder,
                      lease_left=ttl_ms / 1000 if holder is not None and ttl_ms >= 0
                      else None)


def get_health(queue: str, *, broker: Broker | None = None,
               now_ms: int | None = None) -> QueueHealth:
    """The dashboard's figures of `queue`, in five pipelined round trips."""
    broker = broker or get_store().streams
    now_ms = clock.now_ms() if now_ms is None else now_ms
    stats = get_stats(queue, broker=broker, now_ms=now_ms)
    minutes = minute_counts(queue, HOUR_MINUTES, broker=broker, now_ms=now_ms)
    consumers, total = _consumers(broker, queue, now_ms)
    return QueueHealth(
        stats=stats, lag=None if stats.lag_source == "estimate" else stats.waiting,
        consumers=consumers, consumer_count=total,
        failed_last_hour=sum(minute.failed for minute in minutes), minutes=tuple(minutes),
    )


def dashboard_queues(broker: Broker | None = None) -> list[str]:
    """Queues workers consume, queues registered tasks name, and DEFAULT_QUEUE."""
    return queues_of(broker or get_store().streams, [get_settings().DEFAULT_QUEUE])


def queues_of(broker: Broker, extra: Any = ()) -> list[str]:
    """Queues workers consume and dispatches used (until the leader forgets them),
    queues declared in code and settings (the Tasks backend's QUEUES too), and `extra`,
    sorted."""
    recorded = broker.store.inspect.recorded_queues()
    return sorted(recorded | declared_queues() | set(extra))


def _consumers(broker: Broker, queue: str, now_ms: int) -> tuple[tuple[ConsumerInfo, ...], int]:
    """The group's consumers, live ones first, then by idle time; and how many there are."""
    inspector = broker.store.inspect
    listed, live = inspector.consumers(queue, now_ms)
    live_names = set(live)
    rows = sorted(listed, key=lambda row: (row.name not in live_names, row.idle_ms))
    shown = rows[:MAX_CONSUMERS]
    loads = inspector.worker_loads([row.name for row in shown])
    return tuple(
        ConsumerInfo(
            name=row.name, pending=row.pending, idle=row.idle_ms / 1000,
            inactive=None if row.inactive_ms is None else row.inactive_ms / 1000,
            live=row.name in live_names, threads=threads, busy=busy,
        )
        for row, (threads, busy) in zip(shown, loads, strict=True)
    ), len(rows)


# LONG_QUEUE_HOOK: tell someone when a queue's predicted wait passes LONG_QUEUE_THRESHOLD.
#
# Every worker checks the figures it reads, but the hook fires at most once per
# LONG_QUEUE_COOLDOWN for a queue across the whole site: the worker that sets the queue's
# gate key (SET NX PX cooldown) calls it; the others see the gate and stay quiet. The hook
# runs in a thread of its own, so a slow one (an HTTP call to a pager) never delays the
# worker, and whatever it raises is logged, never raised into the worker.

logger = logging.getLogger(__name__)


class LongQueueHook:
    """Calls `hook(stats)` for queues whose predicted wait is above `threshold` seconds."""

    def __init__(
        self, hook: str | Callable[[QueueStats], Any], *, threshold: float, cooldown: float,
        gates: StatsStore, holder: str = "",
    ) -> None:
        self.hook = hook
        self.threshold = threshold
        self.cooldown_ms = max(1, round(cooldown * 1000))
        self.gates = gates  # the queues' gate keys (SET NX PX)
        self.holder = holder or "worker"

    def check(self, figures: Iterable[QueueStats]) -> list[threading.Thread]:
        """Fire the hook for every queue that is too long and not cooling down.

        Returns the threads started (tests join them).
        """
        started = []
        for stats in figures:
            if stats.predicted_wait is None or stats.predicted_wait <= self.threshold:
                continue
            if not self.gates.open_gate(stats.queue, self.holder, self.cooldown_ms):
                continue  # fired (here or by another worker) less than a cooldown ago
            logger.warning("queue %s is long: predicted wait %.1fs > LONG_QUEUE_THRESHOLD "
                           "%.1fs (length=%d, average=%s, threads=%d); calling the hook",
                           stats.queue, stats.predicted_wait, self.threshold, stats.length,
                           _seconds(stats.average), stats.threads)
            thread = threading.Thread(target=self._call, args=(stats,), daemon=True,
                                      name=f"taskrunner-long-queue-{stats.queue}")
            thread.start()
            started.append(thread)
        return started

    def _call(self, stats: QueueStats) -> None:
        try:
            hook = import_string(self.hook) if isinstance(self.hook, str) else self.hook
            hook(stats)
        except Exception:
            logger.exception("LONG_QUEUE_HOOK %s raised for queue %s", self.hook, stats.queue)


def _seconds(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.3f}s"
