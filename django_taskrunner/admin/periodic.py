"""Admin for `PeriodicTask`: schedules kept in the database, edited by operators."""

from __future__ import annotations

from django.contrib import admin

from django_taskrunner.admin.nul_free import NulFreeChangeListMixin


class PeriodicTaskAdmin(NulFreeChangeListMixin, admin.ModelAdmin):
    """Schedules kept in the database; `PeriodicTask.clean()` checks each one on save."""

    list_display = ("name", "task_name", "cron", "interval", "queue", "enabled", "last_run_at",
                    "next_run_at")
    list_filter = ("enabled", "task_name")
    search_fields = ("name", "task_name")
    fields = ("name", "task_name", "cron", "interval", "payload", "queue", "enabled",
              "last_run_at", "next_run_at")
    readonly_fields = ("last_run_at", "next_run_at")
