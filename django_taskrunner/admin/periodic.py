"""Admin for `PeriodicTask`: schedules kept in the database, edited by operators; and,
above them, the schedules declared in code (`@task(cron=...)`, `@task(schedule=...)`),
read-only, with their next run time."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse

from django_taskrunner.admin.shared import NulFreeChangeListMixin
from django_taskrunner.core import clock
from django_taskrunner.exceptions import TaskRunnerError
from django_taskrunner.models import PeriodicTask
from django_taskrunner.scheduling.periodic import Schedule, code_schedules


@dataclass(frozen=True)
class CodeSchedule:
    """One schedule declared in code, as the periodic page shows it."""

    task_name: str
    queue: str
    every: str  # the cron expression, or "every N s"
    next_run: datetime | None  # None: the schedule cannot be computed


def describe_schedule(schedule: Schedule) -> str:
    if schedule.cron is not None:
        return schedule.cron
    seconds = (schedule.interval_ms or 0) / 1000
    return f"every {seconds:g} s"


def declared_schedules(now_ms: int | None = None) -> list[CodeSchedule]:
    """The code schedules, by task name, each with its next occurrence after `now_ms`.

    The next run is the schedule's next occurrence; the leader fires it then (a worker
    must be running)."""
    now = clock.now_ms() if now_ms is None else now_ms
    shown = []
    for schedule in sorted(code_schedules(), key=lambda s: s.task_name):
        try:
            next_run: datetime | None = datetime.fromtimestamp(
                schedule.next_after(now) / 1000, tz=UTC)
        except (TaskRunnerError, ValueError, OverflowError):
            next_run = None
        shown.append(CodeSchedule(schedule.task_name, schedule.queue, describe_schedule(schedule),
                                  next_run))
    return shown


class PeriodicTaskAdmin(NulFreeChangeListMixin, admin.ModelAdmin):
    """Schedules kept in the database; `PeriodicTask.clean()` checks each one on save."""

    list_display = ("name", "task_name", "schedule", "queue", "enabled", "last_run_at",
                    "next_run_at")
    list_filter = ("enabled", "task_name")
    search_fields = ("name", "task_name")
    fields = ("name", "task_name", "cron", "interval", "payload", "queue", "enabled",
              "last_run_at", "next_run_at")
    readonly_fields = ("last_run_at", "next_run_at")
    change_list_template = "admin/django_taskrunner/periodictask/change_list.html"

    @admin.display(description="schedule")
    def schedule(self, obj: PeriodicTask) -> str:
        """The cron expression or the interval, in one column."""
        return obj.cron if obj.cron else f"every {obj.interval} s"

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        """The rows, and the schedules declared in code above them."""
        context = {**(extra_context or {}), "code_schedules": declared_schedules()}
        return super().changelist_view(request, extra_context=context)
