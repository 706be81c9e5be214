"""`WorkerSettings`: everything a worker is told, merged once, before it starts.

Each value comes from the first place that gives one: the `runtasks` option, then
`TASKRUNNER`, then `conf.DEFAULTS` (`get_settings()` merges the last two). An option
that was not given is None and falls through; a given 0 or False is kept. The worker
then reads its settings from this object only, never from `get_settings()` itself.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from django_taskrunner.conf import Settings, get_settings
from django_taskrunner.worker.pool import ScalingPolicy, default_tolerance
from django_taskrunner.worker.reclaim import dead_consumer_timeout

T = TypeVar("T")


class PoolSizeConflict(ValueError):
    """The pool options contradict each other (runtasks reports it as a CommandError)."""


# Redis connections a worker's own threads may hold at once, beside one per fetcher and
# pool thread (acker, heartbeat, monitor, election, scheduler, cancels, event loop...),
# with room to spare: what `store.connection.make_room` lets its pool open.
OWN_CONNECTIONS = 16


@dataclass(frozen=True)
class WorkerSettings:
    """The settings of one worker process (see `conf.DEFAULTS` for what each one means)."""

    queues: tuple[str, ...]
    concurrency: int  # the pool's first size (the smallest when it autoscales)
    scaling: ScalingPolicy | None  # None: a fixed pool
    max_workers: int
    batch_size: int
    block_ms: int
    shutdown_timeout: float
    consumer: str
    burst: bool
    scheduler: bool
    leader_lease: float
    reservation_timeout: float
    time_limit_grace: float
    dead_consumer_timeout: float
    stats_interval: float
    stats_window: int
    result_ttl: int = 86400  # seconds a finished task's record is kept (0: none)
    async_concurrency: int = 100  # `async def` tasks awaited side by side on the event loop
    prefetch_ms: int = 20  # work a read may grow to hold beyond `batch_size` (fetcher.py)
    lost_after: float = 15.0  # WORKER_LOST_AFTER: a heartbeat this old, declared lost
    # `runtasks -Q a -Q b[:weight]`: (queue, weight) in the order given, every weight 0 for
    # a strict order; None: the queues are read side by side (worker/turns.py).
    queue_order: tuple[tuple[str, int], ...] | None = None


def default_consumer_name() -> str:
    """Unique per process: host, pid and a random suffix."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


def first(given: T | None, fallback: T) -> T:
    """`given` unless it is None (never `or`: a given 0 or False counts)."""
    return fallback if given is None else given


def pool_sizing(
    concurrency: int | None, min_workers: int | None, max_workers: int | None,
    settings: Settings,
) -> tuple[int, ScalingPolicy | None]:
    """(first pool size, scaling policy or None for a fixed pool).

    `concurrency` is a fixed pool. Otherwise the pool autoscales when a smallest size is
    known (`min_workers` or MIN_WORKERS), up to `max_workers` or MAX_WORKERS.
    """
    if concurrency is not None:
        if min_workers is not None or max_workers is not None:
            raise PoolSizeConflict("--concurrency sets a fixed pool; give it or "
                                   "--min-workers/--max-workers, not both")
        return concurrency, None
    largest = first(max_workers, settings.MAX_WORKERS)
    smallest = first(min_workers, settings.MIN_WORKERS)
    if smallest is None:
        return largest, None
    if smallest > largest:
        raise PoolSizeConflict(
            f"the smallest pool ({smallest}, --min-workers or MIN_WORKERS) is larger than "
            f"the largest ({largest}, --max-workers or MAX_WORKERS)")
    return smallest, ScalingPolicy(
        min_workers=smallest, max_workers=largest, desired_wait=settings.DESIRED_WAIT,
        tolerance=default_tolerance(settings.DESIRED_WAIT, settings.DESIRED_WAIT_TOLERANCE),
        cooldown=settings.TUNING_COOLDOWN,
    )


def worker_settings(
    queues: Sequence[str], *, concurrency: int | None = None, min_workers: int | None = None,
    max_workers: int | None = None, scaling: ScalingPolicy | None = None, **given: Any,
) -> WorkerSettings:
    """The one place a worker's settings are merged: `given` over TASKRUNNER over DEFAULTS.

    `given` holds the other fields of `WorkerSettings` by name (None: not given). A
    `scaling` policy passed as is (tests) replaces the one `pool_sizing` would build.
    """
    settings = get_settings()
    unknown = set(given) - set(WorkerSettings.__dataclass_fields__)
    if unknown:
        raise TypeError(f"unknown worker settings: {', '.join(sorted(unknown))}")
    size, policy = pool_sizing(concurrency, min_workers, max_workers, settings)
    policy = first(scaling, policy)
    timeout = first(given.get("reservation_timeout"), settings.RESERVATION_TIMEOUT)
    return WorkerSettings(
        queues=tuple(dict.fromkeys(queues)),
        concurrency=size,
        scaling=policy,
        max_workers=policy.max_workers if policy else first(max_workers, settings.MAX_WORKERS),
        batch_size=first(given.get("batch_size"), settings.BATCH_SIZE),
        block_ms=first(given.get("block_ms"), settings.BLOCK_MS),
        shutdown_timeout=first(given.get("shutdown_timeout"), settings.SHUTDOWN_TIMEOUT),
        consumer=first(given.get("consumer"), default_consumer_name()),
        burst=first(given.get("burst"), False),
        scheduler=first(given.get("scheduler"), True),
        leader_lease=first(given.get("leader_lease"), settings.LEADER_LEASE),
        reservation_timeout=timeout,
        time_limit_grace=first(given.get("time_limit_grace"), settings.TIME_LIMIT_GRACE),
        dead_consumer_timeout=first(given.get("dead_consumer_timeout"), dead_consumer_timeout(
            settings.DEAD_CONSUMER_TIMEOUT, timeout)),
        stats_interval=first(given.get("stats_interval"), settings.STATS_INTERVAL),
        stats_window=first(given.get("stats_window"), settings.STATS_WINDOW),
        result_ttl=first(given.get("result_ttl"), settings.RESULT_TTL),
        async_concurrency=first(given.get("async_concurrency"), settings.ASYNC_CONCURRENCY),
        prefetch_ms=first(given.get("prefetch_ms"), settings.PREFETCH_MS),
        queue_order=given.get("queue_order"),
        lost_after=settings.WORKER_LOST_AFTER,
    )
