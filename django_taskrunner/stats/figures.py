"""Reading a queue's figures: `get_stats(queue)`, shared by every worker and the admin.

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

import math
from dataclasses import asdict, dataclass
from typing import Any

from django_taskrunner.conf import get_settings
from django_taskrunner.core import clock
from django_taskrunner.core.registry import registry
from django_taskrunner.stats.recorder import BUCKET_LABELS, PICKUP_BUCKETS, PICKUP_LABELS
from django_taskrunner.stats.store import COUNTERS
from django_taskrunner.store import keys, sharding
from django_taskrunner.store.broker import Broker, get_broker


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
    """The figures of `queue`, read in a few pipelined round trips.

    `tasks=False` skips the per-task figures (what the autoscaler reads each interval).
    """
    broker = broker or get_broker()
    now_ms = clock.now_ms() if now_ms is None else now_ms
    first = _read_first(broker, queue, now_ms)
    streams = [_stream_figures(broker, shard, groups, length)
               for shard, groups, length in first["streams"]]
    pending = sum(stream.pending for stream in streams)
    waiting = sum(stream.waiting for stream in streams)
    # Every stream's figure is exact only if each is; one estimate makes the sum one.
    lag_source = _combined_source([stream.lag_source for stream in streams])
    totals = _decode_hash(first["stats"])
    task_names = _task_names(totals) if tasks else []
    second = _read_second(broker, queue, streams, first["workers"], task_names)
    window = [int(value) / 1e6 for value in first["window"]]
    average = sum(window) / len(window) if window else None
    threads = sum(threads for threads, _busy in second["workers"])
    length = waiting + pending
    return QueueStats(
        queue=queue, length=length, waiting=waiting, pending=pending,
        oldest_wait=_oldest_wait(second["oldest"], now_ms) if waiting else None,
        workers=len(second["workers"]), threads=threads,
        busy=sum(busy for _threads, busy in second["workers"]),
        average=average, p95=percentile(window, 0.95),
        throughput=_throughput(first["minutes"], now_ms),
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


def _stream_figures(broker: Broker, shard: str, groups: Any, length: Any) -> _StreamFigures:
    if isinstance(groups, Exception):  # no stream yet: nothing dispatched, no worker
        groups = []
    group = _group_info(groups, broker.group)
    pending = int(group.get("pending") or 0)
    waiting, lag_source = _waiting(group, int(length), pending, broker.delete_on_ack)
    return _StreamFigures(
        shard=shard, waiting=waiting, pending=pending, lag_source=lag_source,
        last_delivered=_text(group.get("last-delivered-id") or b"0-0"))


def _combined_source(sources: list[str]) -> str:
    for worst in ("estimate", "computed"):
        if worst in sources:
            return worst
    return "redis"


def _read_first(broker: Broker, queue: str, now_ms: int) -> dict[str, Any]:
    """Every stream's group and length (each shard's, for a split queue), and the
    queue's counters, in one pipeline (any slots: it is not a transaction)."""
    prefix, minute = broker.prefix, now_ms // 60_000
    shards = sharding.shards(queue)
    pipe = broker.client.pipeline(transaction=False)
    for shard in shards:
        pipe.xinfo_groups(broker.stream(shard))
        pipe.xlen(broker.stream(shard))
    pipe.hgetall(keys.stats_key(prefix, queue))
    pipe.lrange(keys.window_key(prefix, queue), 0, -1)
    pipe.hgetall(keys.minute_key(prefix, queue, minute))
    pipe.hgetall(keys.minute_key(prefix, queue, minute - 1))
    pipe.zrangebyscore(keys.queue_workers_key(prefix, queue), now_ms, "+inf")
    replies = pipe.execute(raise_on_error=False)
    per_stream, rest = replies[:2 * len(shards)], replies[2 * len(shards):]
    for reply in rest:
        if isinstance(reply, Exception):
            raise reply
    stats, window, current, previous, workers = rest
    return {"streams": list(zip(shards, per_stream[0::2], per_stream[1::2], strict=True)),
            "stats": stats, "window": window, "minutes": (current, previous),
            "workers": workers}


def _read_second(broker: Broker, queue: str, streams: list[_StreamFigures],
                 workers: list[Any], task_names: list[str]) -> dict[str, Any]:
    prefix = broker.prefix
    pipe = broker.client.pipeline(transaction=False)
    for stream in streams:  # the first waiting entry of each stream
        pipe.xrange(broker.stream(stream.shard), f"({stream.last_delivered}", "+", count=1)
    for consumer in workers:
        pipe.hmget(keys.worker_key(prefix, _text(consumer)), "threads", "busy")
    for name in task_names:
        pipe.lrange(keys.window_key(prefix, queue, name), 0, -1)
    replies = pipe.execute()
    firsts, rest = replies[:len(streams)], replies[len(streams):]
    beats, windows = rest[:len(workers)], rest[len(workers):]
    live = [(int(threads), int(busy or 0)) for threads, busy in beats if threads is not None]
    oldest = min((entries[0] for entries in firsts if entries),
                 key=lambda entry: _id_ms(entry[0]), default=None)
    return {"oldest": [oldest] if oldest is not None else [], "workers": live,
            "windows": {name: [int(v) / 1e6 for v in values]
                        for name, values in zip(task_names, windows, strict=True)}}


def _id_ms(stream_id: bytes | str) -> int:
    return int(_text(stream_id).split("-", 1)[0])


def _task_names(totals: dict[str, str]) -> list[str]:
    """Tasks with a counter in the stats hash (`task:<name>:<counter>`)."""
    names = set()
    for field in totals:
        if field.startswith("task:"):
            name, _sep, counter = field[5:].rpartition(":")
            if counter in COUNTERS:
                names.add(name)
    return sorted(names)


def _group_info(groups: list[dict[str, Any]], name: str) -> dict[str, Any]:
    for group in groups:
        if _text(group.get("name", b"")) == name:
            return group
    return {}


def _waiting(group: dict[str, Any], length: int, pending: int,
             delete_on_ack: bool) -> tuple[int, str]:
    """Entries not yet delivered, and where the figure comes from (`QueueStats.lag_source`):
    the group's lag (Redis 7+), else what XLEN implies."""
    lag = group.get("lag")
    if lag is not None:
        return int(lag), "redis"
    if not group:
        return length, "computed"
    # Redis < 7, or a lag Redis cannot compute: with DELETE_ON_ACK the stream holds exactly
    # the waiting and the pending entries.
    if delete_on_ack:
        return max(0, length - pending), "computed"
    return length, "estimate"


def _oldest_wait(entries: list[Any], now_ms: int) -> float | None:
    if not entries:
        return None
    stream_id = _text(entries[0][0])
    return max(0.0, (now_ms - int(stream_id.split("-", 1)[0])) / 1000)


def _throughput(minutes: tuple[dict[bytes, bytes], dict[bytes, bytes]], now_ms: int) -> float:
    """Finished tasks per second over the last 60 s (sliding-window estimate).

    This minute's count plus the previous minute's, weighted by the part of it that is
    still inside the last 60 seconds.
    """
    current, previous = (_decode_hash(counts) for counts in minutes)
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
    """Outcomes per minute over the last `minutes` minutes, oldest first (kept 2 hours)."""
    broker = broker or get_broker()
    current = (clock.now_ms() if now_ms is None else now_ms) // 60_000
    starts = list(range(current - minutes + 1, current + 1))
    pipe = broker.client.pipeline(transaction=False)
    for minute in starts:
        pipe.hgetall(keys.minute_key(broker.prefix, queue, minute))
    return [
        MinuteCounts(start_ms=minute * 60_000, succeeded=_int(counts, "succeeded"),
                     failed=_int(counts, "failed"), retried=_int(counts, "retried"))
        for minute, counts in zip(starts, map(_decode_hash, pipe.execute()), strict=True)
    ]


def known_queues() -> list[str]:
    """Every queue a registered task names, plus DEFAULT_QUEUE."""
    return sorted(registry.queues() | {get_settings().DEFAULT_QUEUE})


def _decode_hash(raw: dict[Any, Any]) -> dict[str, str]:
    return {_text(key): _text(value) for key, value in raw.items()}


def _int(values: dict[str, str], name: str) -> int:
    return int(values.get(name) or 0)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
