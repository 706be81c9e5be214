"""The figures of the queues dashboard and of `manage.py taskrunner_stats`: each queue's
`QueueStats` (stats.py) plus its consumer-group lag, its consumers with their idle
times, its failures of the last hour and its per-minute counts; and the consumer
group's leader. Both read them here, so both show the same numbers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from django_taskrunner.conf import get_settings
from django_taskrunner.core import clock
from django_taskrunner.stats.figures import (
    MinuteCounts,
    QueueStats,
    declared_queues,
    get_stats,
    minute_counts,
)
from django_taskrunner.store import get_store
from django_taskrunner.store.streams import Broker

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
