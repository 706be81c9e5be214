"""Dispatching failed tasks again, in bounded chunks, for the admin's retry actions."""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from django.db.models import QuerySet

from django_taskrunner.core.dispatch import dispatch, dispatch_many
from django_taskrunner.core.registry import registry
from django_taskrunner.core.steps import with_kept_steps
from django_taskrunner.exceptions import TaskRunnerError
from django_taskrunner.models import FailedTask
from django_taskrunner.shim import SHIM_TASK

logger = logging.getLogger(__name__)

CHUNK = 500


@dataclass
class RetryReport:
    """How a retry went: rows dispatched again (and deleted), and rows kept, with why."""

    retried: int = 0
    problems: list[str] = field(default_factory=list)
    kept: int = 0

    def keep(self, row: FailedTask, why: object) -> None:
        self.kept += 1
        if len(self.problems) < 20:
            self.problems.append(f"{row.task_name} ({row.message_id}): {why}")


def retry_rows(rows: Iterable[FailedTask], report: RetryReport) -> None:
    """Dispatch each row's task again with its payload (fresh attempts, a new id; the
    same id for a task that kept durable steps, so they hold); delete the rows that were
    dispatched. Rows that cannot be dispatched are kept."""
    batches: dict[tuple[str, str], list[tuple[FailedTask, object]]] = defaultdict(list)
    rows = list(rows)
    stepped = with_kept_steps([(row.queue, row.message_id) for row in rows])  # same id
    for row in rows:
        try:
            payload = json.loads(row.payload)
        except (ValueError, RecursionError):
            report.keep(row, "the payload is not JSON (the message could not be decoded)")
            continue
        task_name = dispatched_name(row.task_name, payload)
        if registry.find(task_name) is None:
            report.keep(row, "no task of that name is registered")
            continue
        batches[(task_name, row.queue)].append((row, payload))
    done: list[int] = []
    for (task_name, queue), entries in batches.items():
        task = registry.get(task_name)
        if task.options.unique or any(row.message_id in stepped for row, _p in entries):
            done += _one_by_one(task_name, queue, entries, report, stepped)
            continue
        try:
            dispatch_many(task, [payload for _row, payload in entries], queue=queue)
        except TaskRunnerError as exc:
            for row, _payload in entries:
                report.keep(row, exc)
            continue
        done += [row.pk for row, _payload in entries]
    FailedTask.objects.filter(pk__in=done).delete()
    report.retried += len(done)


def dispatched_name(shown: str, payload: object) -> str:
    """The task to dispatch for a row named `shown`: a Django Tasks framework task's row
    shows the framework function (`tasks.shown_name`) and runs through the shim."""
    if (registry.find(shown) is None and isinstance(payload, dict)
            and payload.get("func") == shown):
        return SHIM_TASK
    return shown


def _one_by_one(task_name: str, queue: str, entries: list[tuple[FailedTask, object]],
                report: RetryReport, stepped: AbstractSet[str] = frozenset()) -> list[int]:
    done = []
    for row, payload in entries:
        try:
            task_id = row.message_id if row.message_id in stepped else None
            dispatch(task_name, payload, queue=queue, task_id=task_id)
        except TaskRunnerError as exc:
            report.keep(row, exc)
            continue
        done.append(row.pk)
    return done


def retry_queryset(queryset: QuerySet[FailedTask]) -> RetryReport:
    """Retry every row of `queryset`, CHUNK rows at a time, by ascending primary key, so
    100,000 rows never sit in memory at once and deleting them does not disturb the walk."""
    report = RetryReport()
    last_pk = 0
    while True:
        chunk = list(queryset.filter(pk__gt=last_pk).order_by("pk")[:CHUNK])
        if not chunk:
            return report
        last_pk = chunk[-1].pk
        retry_rows(chunk, report)
