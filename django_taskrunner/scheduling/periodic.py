"""Periodic tasks: schedules from `@task(cron=...)` / `@task(schedule=...)` and from
`PeriodicTask` rows, fired by the leader's scheduler, each occurrence once.

Exactly once: each queue keeps a hash `<prefix>:{<queue>}:periodic` of schedule id ->
last occurrence fired (epoch ms). `fire_periodic.lua` adds an occurrence's message only
if it is later than that mark, and moves the mark, in one step; two leaders during a
hand-over therefore fire it once, and no TTL has to outlive the longest period.

Missed occurrences: a schedule first seen is marked "now" (nothing from before fires).
When the next occurrence after the mark is already past (no worker ran meanwhile), only
the latest past occurrence fires, once, and the schedule goes on from now.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from django.db import DatabaseError, close_old_connections
from django.utils import timezone

from django_taskrunner.core import clock, cron, sharding
from django_taskrunner.core.dispatch import new_message, resolve_queue
from django_taskrunner.core.registry import registry
from django_taskrunner.core.sending import fair_queue
from django_taskrunner.exceptions import TaskRunnerError
from django_taskrunner.models import PeriodicTask
from django_taskrunner.store import get_store, keys
from django_taskrunner.store.errors import REPLY_ERROR, stalls_writes
from django_taskrunner.store.streams import Broker

logger = logging.getLogger(__name__)

# Message ids of periodic occurrences are derived from the schedule and the occurrence,
# so even a replay of one occurrence carries the same id (FailedTask rows stay single).
_ID_NAMESPACE = uuid.UUID("8d3c1f0e-5b7a-4c2e-9a61-2f4b0c7d9e11")
# The leader rereads the PeriodicTask table this often, and at once when a row is saved.
RELOAD_SECONDS = 30.0


@dataclass(frozen=True)
class Schedule:
    """One periodic schedule: what to run, where, and when (cron or interval)."""

    id: str  # "task:<task name>" or "row:<PeriodicTask pk>"
    task_name: str
    queue: str
    payload: Any
    cron: str | None = None
    interval_ms: int | None = None
    row_pk: int | None = None

    def shard(self) -> str:
        """Where its occurrences go, always the same shard: the mark lives beside them."""
        return sharding.shard_for(self.queue, self.id)

    def next_after(self, ms: int) -> int:
        if self.cron is not None:
            return cron.cron_next_after(self.cron, ms, timezone.get_default_timezone())
        return cron.interval_next_after(self.interval_ms or 1, ms)

    def latest_at_or_before(self, ms: int) -> int | None:
        if self.cron is not None:
            return cron.cron_latest_at_or_before(self.cron, ms, timezone.get_default_timezone())
        return cron.interval_latest_at_or_before(self.interval_ms or 1, ms)


def code_schedules() -> list[Schedule]:
    """Schedules declared with `@task(cron=...)` or `@task(schedule=seconds)`."""

    found = []
    for task in registry:
        options = task.options
        if options.cron is None and options.schedule is None:
            continue
        interval = None if options.schedule is None else max(1, round(options.schedule * 1000))
        found.append(Schedule(id=f"task:{task.name}", task_name=task.name,
                              queue=resolve_queue(task, None), payload=None,
                              cron=options.cron, interval_ms=interval))
    return found


def row_schedules() -> list[Schedule]:
    """Schedules of enabled `PeriodicTask` rows whose task is registered."""

    found = []
    for row in PeriodicTask.objects.filter(enabled=True):
        task = registry.find(row.task_name)
        if task is None:
            logger.error("periodic task %r names task %r, which is not registered; skipped",
                         row.name, row.task_name)
            continue
        try:
            queue = resolve_queue(task, row.queue or None)
        except TaskRunnerError as exc:
            logger.error("periodic task %r: %s; skipped", row.name, exc)
            continue
        found.append(Schedule(id=f"row:{row.pk}", task_name=row.task_name, queue=queue,
                              payload=row.payload, cron=row.cron or None,
                              interval_ms=row.interval * 1000 if row.interval else None,
                              row_pk=row.pk))
    return found


class PeriodicRunner:
    """Fires due occurrences; driven by the scheduler with explicit times (testable)."""

    def __init__(self, broker: Broker, *, with_rows: bool = True) -> None:
        self.broker = broker
        self.store = broker.store.schedule
        self.with_rows = with_rows
        self._next: dict[str, tuple[Schedule, int]] = {}
        self._spoiled: set[str] = set()  # schedules whose keys are spoiled (logged)

    def __len__(self) -> int:
        return len(self._next)

    def load(self, now_ms: int) -> None:
        """(Re)read the schedules and their marks; a new schedule is marked `now_ms`."""
        schedules = code_schedules()
        if self.with_rows:
            schedules += self._rows()
        marks = self.store.mark_schedules(
            [(schedule.shard(), schedule.id) for schedule in schedules], now_ms)
        self._next = {
            schedule.id: (schedule, schedule.next_after(mark))
            for schedule, mark in zip(schedules, marks, strict=True) if mark is not None
        }
        spoiled = {schedule.id for schedule, mark in zip(schedules, marks, strict=True)
                   if mark is None}
        for schedule_id in sorted(spoiled - self._spoiled):
            self._log_spoiled(schedule_id, "its mark cannot be read")
        self._spoiled = spoiled

    def _log_spoiled(self, schedule_id: str, why: str) -> None:
        """A schedule that a bad key spoils is skipped (logged once a reload), and the
        others fire as usual: one key written by hand stops no other task."""
        self._spoiled.add(schedule_id)
        logger.error("periodic task %r is skipped: %s (a key under %s holds what no "
                     "release of django-taskrunner writes)", schedule_id, why,
                     self.broker.prefix)

    def _rows(self) -> list[Schedule]:
        close_old_connections()
        try:
            return row_schedules()
        except DatabaseError as exc:
            logger.error("cannot read periodic tasks from the database: %s", exc)
            return [entry[0] for entry in self._next.values() if entry[0].row_pk is not None]
        finally:
            close_old_connections()

    def run_due(self, now_ms: int) -> int | None:
        """Fire every schedule whose next occurrence is due; returns the next one (ms)."""
        for schedule_id, (schedule, next_ms) in list(self._next.items()):
            if next_ms <= now_ms:
                # Several occurrences may have passed (a pause, a leader change): fire
                # the latest one only.
                occurrence = schedule.latest_at_or_before(now_ms)
                if occurrence is not None:
                    self.fire(schedule, occurrence, now_ms)
                self._next[schedule_id] = (schedule, schedule.next_after(now_ms))
        return min((next_ms for _, next_ms in self._next.values()), default=None)

    def fire(self, schedule: Schedule, occurrence_ms: int, now_ms: int) -> bool:
        """Queue one occurrence unless it (or a later one) was fired; True if queued."""
        task = registry.find(schedule.task_name)
        if task is None:
            return False
        message = new_message(task, schedule.payload, queue=schedule.queue,
                              start_ms=occurrence_ms)
        occurrence_id = uuid.uuid5(_ID_NAMESPACE, f"{schedule.id}@{occurrence_ms}").hex
        message = replace(message, id=occurrence_id, dispatched_at_ms=now_ms)
        fair = message.fair_key is not None or fair_queue(  # to its turn (store/fair.py)
            self.broker, keys.level_name(schedule.shard(), message.priority))
        try:
            fired = self.store.fire_periodic(schedule.shard(), schedule.id, occurrence_ms,
                                             message.to_json(), fair=fair)
        except REPLY_ERROR as exc:
            if stalls_writes(exc):
                raise  # Redis refuses writes: the scheduler waits, as through an outage
            if schedule.id not in self._spoiled:
                self._log_spoiled(schedule.id, f"it cannot be fired ({exc})")
            return False
        if fired:
            logger.info("periodic task=%s id=%s queue=%s fired for %s", schedule.task_name,
                        message.id, schedule.queue, _iso(occurrence_ms))
            if schedule.row_pk is not None:
                self._record_run(schedule, occurrence_ms, schedule.next_after(now_ms))
        return fired

    def _record_run(self, schedule: Schedule, occurrence_ms: int, next_ms: int) -> None:
        close_old_connections()
        try:
            PeriodicTask.objects.filter(pk=schedule.row_pk).update(
                last_run_at=_aware(occurrence_ms), next_run_at=_aware(next_ms))
        except DatabaseError as exc:
            logger.warning("cannot record the run of periodic task %s: %s", schedule.id, exc)
        finally:
            close_old_connections()


def _aware(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _iso(ms: int) -> str:
    return _aware(ms).isoformat()


def announce_change(**kwargs: Any) -> None:
    """Signal receiver: tell the leader's scheduler to reload the database schedules."""
    try:
        get_store().schedule.announce_periodic_change(clock.now_ms())
    except Exception as exc:  # Redis down must not break an admin save
        logger.warning("could not announce a periodic task change (%s); the scheduler "
                       "rereads the table within %d seconds", exc, RELOAD_SECONDS)
