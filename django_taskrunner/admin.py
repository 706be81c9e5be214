"""Admin pages: failed tasks (read-only, with a retry action), periodic tasks, and the
Redis-held delayed tasks (`delayed_admin.py`)."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from django_taskrunner import delayed_admin  # noqa: F401 - registers the delayed tasks page
from django_taskrunner.dispatch import dispatch
from django_taskrunner.exceptions import TaskRunnerError
from django_taskrunner.models import FailedTask, PeriodicTask


def pretty_json(text: str) -> str:
    """Indented JSON, or the text unchanged when it is not JSON."""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False, sort_keys=True)
    except ValueError:
        return text


@admin.register(FailedTask)
class FailedTaskAdmin(admin.ModelAdmin):
    list_display = ("task_name", "queue", "error_class", "short_error", "attempts", "failed_at")
    list_filter = ("task_name", "queue", "error_class", "failed_at")
    search_fields = ("task_name", "message_id", "payload", "error")
    date_hierarchy = "failed_at"
    actions = ["retry_selected"]
    fields = ("task_name", "queue", "message_id", "attempts", "worker", "failed_at",
              "error_class", "error", "payload_pretty", "traceback_pre")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="error")
    def short_error(self, obj: FailedTask) -> str:
        return obj.error if len(obj.error) <= 120 else obj.error[:117] + "..."

    @admin.display(description="payload")
    def payload_pretty(self, obj: FailedTask) -> str:
        return format_html("<pre>{}</pre>", pretty_json(obj.payload))

    @admin.display(description="traceback")
    def traceback_pre(self, obj: FailedTask) -> str:
        return format_html("<pre>{}</pre>", obj.traceback)

    @admin.action(description="Retry selected failed tasks", permissions=["delete"])
    def retry_selected(self, request: HttpRequest, queryset: QuerySet[FailedTask]) -> None:
        """Dispatch each task again with its payload; the row is deleted once dispatched."""
        retried, problems = 0, []
        for row in queryset.iterator():
            try:
                dispatch(row.task_name, row.payload_value(), queue=row.queue)
            except (ValueError, TaskRunnerError) as exc:
                problems.append(f"{row.task_name} ({row.message_id}): {exc}")
                continue
            row.delete()
            retried += 1
        if retried:
            self.message_user(request, f"Dispatched {retried} task(s) again.", messages.SUCCESS)
        for problem in problems[:20]:
            self.message_user(request, f"Not retried: {problem}", messages.ERROR)


@admin.register(PeriodicTask)
class PeriodicTaskAdmin(admin.ModelAdmin):
    """Schedules kept in the database; `PeriodicTask.clean()` checks each one on save."""

    list_display = ("name", "task_name", "cron", "interval", "queue", "enabled", "last_run_at",
                    "next_run_at")
    list_filter = ("enabled", "task_name")
    search_fields = ("name", "task_name")
    fields = ("name", "task_name", "cron", "interval", "payload", "queue", "enabled",
              "last_run_at", "next_run_at")
    readonly_fields = ("last_run_at", "next_run_at")
