"""`manage.py taskrunner_stats`: each queue's figures as a table, or as JSON with `--json`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_taskrunner.management.commands.runtasks import queue_name
from django_taskrunner.stats import QueueStats, get_stats, known_queues

QUEUE_COLUMNS = ("queue", "length", "waiting", "pending", "workers", "threads", "busy",
                 "tasks/s", "avg", "p95", "wait", "succeeded", "failed", "retried")
TASK_COLUMNS = ("queue", "task", "runs", "avg", "p95", "overall avg", "succeeded", "failed",
                "retried")


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


def queue_row(stats: QueueStats) -> tuple[str, ...]:
    return (stats.queue, str(stats.length), str(stats.waiting), str(stats.pending),
            str(stats.workers), str(stats.threads), str(stats.busy), f"{stats.throughput:.2f}",
            seconds(stats.average), seconds(stats.p95), seconds(stats.predicted_wait),
            str(stats.succeeded), str(stats.failed), str(stats.retried))


def task_rows(stats: QueueStats) -> list[tuple[str, ...]]:
    return [(stats.queue, task.name or "(undecodable)", str(task.runs), seconds(task.average),
             seconds(task.p95), seconds(task.overall_average), str(task.succeeded),
             str(task.failed), str(task.retried)) for task in stats.tasks]


class Command(BaseCommand):
    help = "Show each queue's length, workers, throughput, run times and predicted wait."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--queue", "-Q", action="append", type=queue_name, dest="queues",
                            help="queue to show (repeatable; default: every queue a "
                                 "registered task names, plus DEFAULT_QUEUE)")
        parser.add_argument("--json", action="store_true", help="print JSON instead of tables")

    def handle(self, *args: Any, **options: Any) -> None:
        queues = options["queues"] or known_queues()
        try:
            figures = [get_stats(queue) for queue in queues]
        except Exception as exc:  # the connection error says what to fix
            raise CommandError(f"cannot read the figures from Redis: {exc}") from exc
        if options["json"]:
            self.stdout.write(json.dumps([stats.as_dict() for stats in figures], indent=2))
            return
        self.stdout.write(table(QUEUE_COLUMNS, [queue_row(stats) for stats in figures]))
        rows = [row for stats in figures for row in task_rows(stats)]
        if rows:
            self.stdout.write("")
            self.stdout.write(table(TASK_COLUMNS, rows))
