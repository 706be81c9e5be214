"""`manage.py taskrunner_stats`: the queues dashboard's figures as tables, or as JSON with
`--json` (both read `stats/figures.py`, as the admin's dashboard does)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_taskrunner.core import sharding
from django_taskrunner.core.pauses import paused_queues
from django_taskrunner.management.commands.runtasks import queue_name
from django_taskrunner.stats.figures import (
    LeaderInfo,
    QueueHealth,
    dashboard_queues,
    get_health,
    get_leader,
)
from django_taskrunner.stats.recorder import PICKUP_BUCKETS, PICKUP_LABELS
from django_taskrunner.store import get_store
from django_taskrunner.store.fair import FairKey

QUEUE_COLUMNS = ("queue", "length", "waiting", "pending", "lag", "workers", "threads", "busy",
                 "tasks/s", "avg", "p95", "wait", "pickup-avg", "pickup-p95", "failed/1h",
                 "succeeded", "failed", "retried")
TASK_COLUMNS = ("queue", "task", "runs", "avg", "p95", "overall avg", "pickup-avg",
                "succeeded", "failed", "retried")
PICKUP_COLUMNS = ("queue", "picked up within", "messages")
CONSUMER_COLUMNS = ("queue", "consumer", "state", "pending", "idle", "threads", "busy")
FAIR_COLUMNS = ("queue", "fair key", "waiting for a turn")
# Keys shown per fair queue: those with the most waiting tasks.
FAIR_TOP = 10


def fair_keys(queue: str) -> list[FairKey]:
    """The keys of a fair queue with the most tasks waiting for their turn (none for a
    queue that never used a fair key: one EXISTS pipeline per shard); the key "" is
    the turn of the tasks without a key."""
    fair = get_store().fair
    return fair.top_keys_of_queue(sharding.shards(queue), FAIR_TOP)


def fair_rows(queue: str, found: list[FairKey]) -> list[tuple[str, ...]]:
    """The table rows of `fair_keys`: the tasks without a key read "(no key)"."""
    return [(queue, item.key or "(no key)", str(item.waiting)) for item in found]


def seconds(value: float | None) -> str:
    """A duration for people: ms below a second, "-" when unknown."""
    if value is None:
        return "-"
    if value == 0:
        return "0s"
    return f"{value * 1000:.1f}ms" if value < 1 else f"{value:.2f}s"


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
             for row in [header, *rows]]
    return "\n".join(line.rstrip() for line in lines)


def queue_row(item: QueueHealth, paused: dict[str, int]) -> tuple[str, ...]:
    stats = item.stats
    name = f"{stats.queue} (paused)" if stats.queue in paused else stats.queue
    return (name, str(stats.length), str(stats.waiting), str(stats.pending),
            "n/a" if item.lag is None else str(item.lag), str(stats.workers),
            str(stats.threads), str(stats.busy), f"{stats.throughput:.2f}",
            seconds(stats.average), seconds(stats.p95), seconds(stats.predicted_wait),
            seconds(stats.pickup_average), seconds(stats.pickup_p95), str(item.failed_last_hour),
            str(stats.succeeded), str(stats.failed), str(stats.retried))


def task_rows(item: QueueHealth) -> list[tuple[str, ...]]:
    return [(item.queue, task.name or "(undecodable)", str(task.runs), seconds(task.average),
             seconds(task.p95), seconds(task.overall_average), seconds(task.pickup_average),
             str(task.succeeded),
             str(task.failed), str(task.retried)) for task in item.stats.tasks]


def pickup_rows(item: QueueHealth) -> list[tuple[str, ...]]:
    """The queue's pickup-delay histogram: the buckets that hold any message."""
    stats = item.stats
    return [(item.queue, bucket_label(label), str(count))
            for label, count in zip(PICKUP_LABELS, stats.pickup_buckets, strict=True) if count]


def bucket_label(label: str) -> str:
    return f"> {seconds(PICKUP_BUCKETS[-1])}" if label == "+Inf" else seconds(float(label))


def consumer_rows(item: QueueHealth) -> list[tuple[str, ...]]:
    return [(item.queue, consumer.name, "live" if consumer.live else "no heartbeat",
             str(consumer.pending), seconds(consumer.idle),
             "-" if consumer.threads is None else str(consumer.threads),
             "-" if consumer.busy is None else str(consumer.busy))
            for consumer in item.consumers]


def leader_line(leader: LeaderInfo) -> str:
    if leader.holder is None:
        return f"leader: none in group {leader.group} (no worker holds the lease)"
    return (f"leader: {leader.holder} (group {leader.group}, lease "
            f"{seconds(leader.lease_left)} left)")


class Command(BaseCommand):
    help = ("Show each queue's length, lag, consumers, throughput, run times, predicted wait, "
            "pickup delays and failures of the last hour, and the scheduler's leader.")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--queue", "-Q", action="append", type=queue_name, dest="queues",
                            help="queue to show (repeatable; default: every queue a worker "
                                 "consumes or a registered task names, plus DEFAULT_QUEUE)")
        parser.add_argument("--json", action="store_true", help="print JSON instead of tables")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            queues = options["queues"] or dashboard_queues()
            figures = [get_health(queue) for queue in queues]
            fair = {queue: fair_keys(queue) for queue in queues}
            leader = get_leader()
            paused = paused_queues()
        except Exception as exc:  # the connection error says what to fix
            raise CommandError(f"cannot read the figures from Redis: {exc}") from exc
        if options["json"]:
            self.stdout.write(json.dumps(
                [{**item.as_dict(), "paused": item.queue in paused, "leader": asdict(leader),
                  "fair_keys": [{"key": key.key, "waiting": key.waiting}
                                for key in fair[item.queue]]} for item in figures], indent=2))
            return
        self.stdout.write(table(QUEUE_COLUMNS, [queue_row(item, paused) for item in figures]))
        for header, rows in ((TASK_COLUMNS, [row for item in figures for row in task_rows(item)]),
                             (PICKUP_COLUMNS,
                              [row for item in figures for row in pickup_rows(item)]),
                             (CONSUMER_COLUMNS,
                              [row for item in figures for row in consumer_rows(item)]),
                             (FAIR_COLUMNS, [row for queue, found in fair.items()
                                             for row in fair_rows(queue, found)])):
            if rows:
                self.stdout.write("")
                self.stdout.write(table(header, rows))
        self.stdout.write("")
        self.stdout.write(leader_line(leader))
