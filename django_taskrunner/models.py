"""Database models: `FailedTask` (one row per task that failed for good), `PeriodicTask`
(schedules edited in the admin), and the unmanaged `DelayedTask`, `UniqueLock`, `Queue` and
`Task` that stand for Redis-held data behind the admin pages."""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models

from django_taskrunner.core.cron import check_cron
from django_taskrunner.core.options import check_queue_name
from django_taskrunner.core.registry import registry
from django_taskrunner.exceptions import TaskRunnerError


class FailedTask(models.Model):
    """A task that failed after its last retry, or a message that could not be run.

    Written idempotently, once per dispatch: `message_id` and `dispatch_token` are unique
    together, so a crash that replays the message after the row was written does not
    write a second row, while a `task_id` dispatched again, failing again, gets its own.
    """

    task_name = models.CharField(max_length=255)  # the indexes: Meta.indexes
    queue = models.CharField(max_length=100)
    message_id = models.CharField(max_length=255)  # indexed by the constraint below
    dispatch_token = models.CharField(
        max_length=64, blank=True, default="",
        help_text="Which dispatch of the message id failed (blank: a message that holds no "
                  "lock or task_id, whose id is never reused).",
    )
    payload = models.TextField(blank=True, help_text="The payload as JSON, or the raw message.")
    error_class = models.CharField(max_length=255, blank=True)
    error = models.TextField(blank=True)
    traceback = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=0)
    worker = models.CharField(max_length=255, blank=True)
    failed_at = models.DateTimeField()

    class Meta:
        ordering = ["-failed_at", "-id"]
        # The admin's list in its order, alone and under each filter, so a page is an
        # index range read however many rows there are; the filters list their values
        # through the leading column (admin/failed.py, distinct_values).
        indexes = [
            models.Index(fields=["-failed_at", "-id"], name="taskrunner_failed_recent"),
            models.Index(fields=["task_name", "-failed_at", "-id"],
                         name="taskrunner_failed_task_recent"),
            models.Index(fields=["queue", "-failed_at", "-id"],
                         name="taskrunner_failed_queue_recent"),
            models.Index(fields=["error_class", "-failed_at", "-id"],
                         name="taskrunner_failed_error_recent"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["message_id", "dispatch_token"],
                                    name="taskrunner_failedtask_once_per_dispatch"),
        ]
        verbose_name = "failed task"
        verbose_name_plural = "failed tasks"

    def __str__(self) -> str:
        return f"{self.task_name} ({self.message_id})"


class PeriodicTask(models.Model):
    """A schedule kept in the database (editable in the admin): run a task with a payload
    on a cron expression or every `interval` seconds. The leader fires each occurrence once.
    """

    name = models.CharField(max_length=200, unique=True, help_text="A name for this schedule.")
    task_name = models.CharField(max_length=255, help_text="Registered name of the task to run.")
    cron = models.CharField(
        max_length=200, blank=True,
        help_text='Cron expression in the site\'s time zone, e.g. "*/5 * * * *".',
    )
    interval = models.PositiveIntegerField(
        null=True, blank=True, help_text="Or: run every this many seconds."
    )
    payload = models.JSONField(null=True, blank=True, help_text="JSON passed to the task.")
    queue = models.CharField(max_length=100, blank=True, help_text="Blank: the task's queue.")
    enabled = models.BooleanField(default=True)
    last_run_at = models.DateTimeField(null=True, blank=True, editable=False)
    next_run_at = models.DateTimeField(null=True, blank=True, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "periodic task"
        verbose_name_plural = "periodic tasks"

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """Refuse a schedule the scheduler could not run, naming the field at fault."""
        validate_periodic_row(self)


def validate_periodic_row(row: Any) -> None:
    """`PeriodicTask.clean()`: one of cron/interval, a valid cron, a registered task,
    a valid queue and a JSON payload; raises `ValidationError` keyed by field."""
    errors: dict[str, str] = {}
    if bool(row.cron) == bool(row.interval):
        errors["cron"] = "Give a cron expression or an interval, not both and not neither."
    elif row.cron:
        try:
            check_cron(row.cron)
        except TaskRunnerError as exc:
            errors["cron"] = str(exc)
    if row.task_name not in registry:
        errors["task_name"] = f"No task named {row.task_name!r} is registered."
    if row.queue:
        try:
            check_queue_name(row.queue)
        except TaskRunnerError as exc:
            errors["queue"] = str(exc)
    try:
        json.dumps(row.payload, allow_nan=False)
    except (TypeError, ValueError) as exc:
        errors["payload"] = f"The payload must be JSON: {exc}"
    if errors:
        raise ValidationError(errors)


class DelayedTask(models.Model):
    """Not a table: stands for the Redis-held delayed sets, so the admin can list them
    and so its permissions ("view", "run now", "cancel") can be granted like any model's.
    """

    class Meta:
        managed = False
        default_permissions = ("view",)
        permissions = [
            ("run_delayedtask", "Can run delayed tasks now"),
            ("cancel_delayedtask", "Can cancel delayed tasks"),
        ]
        verbose_name = "delayed task"
        verbose_name_plural = "delayed tasks"

    def __str__(self) -> str:
        return f"delayed task {self.pk}"


class UniqueLock(models.Model):
    """Not a table: stands for the unique locks held in Redis, so the admin can list them
    and so "view" and "release" can be granted like any model's permissions."""

    class Meta:
        managed = False
        default_permissions = ("view",)
        permissions = [("release_uniquelock", "Can release unique locks")]
        verbose_name = "unique lock"
        verbose_name_plural = "unique locks"

    def __str__(self) -> str:
        return f"unique lock {self.pk}"


class Queue(models.Model):
    """Not a table: stands for the queues in Redis, behind the admin's queues dashboard
    (its "view" permission opens the dashboard; "pause" pauses and resumes a queue)."""

    class Meta:
        managed = False
        default_permissions = ("view",)
        permissions = [("pause_queue", "Can pause and resume a queue")]
        verbose_name = "queue"
        verbose_name_plural = "queues"

    def __str__(self) -> str:
        return f"queue {self.pk}"


class Worker(models.Model):
    """Not a table: stands for the live worker processes (their heartbeats in Redis),
    behind the admin's Workers page (its "view" permission opens it)."""

    class Meta:
        managed = False
        default_permissions = ("view",)
        verbose_name = "worker"
        verbose_name_plural = "workers"

    def __str__(self) -> str:
        return f"worker {self.pk}"


class Task(models.Model):
    """Not a table: stands for the tasks in Redis (queued, running, delayed), behind the
    admin's Tasks pages; "view" opens them, "purge" empties a queue's waiting tasks,
    "cancel" cancels one task."""

    class Meta:
        managed = False
        default_permissions = ("view",)
        permissions = [("purge_task", "Can purge a queue's waiting and delayed tasks"),
                       ("cancel_task", "Can cancel a delayed, queued or running task")]
        verbose_name = "task"
        verbose_name_plural = "tasks"

    def __str__(self) -> str:
        return f"task {self.pk}"


class Workflow(models.Model):
    """Not a table: stands for the workflows in Redis (chains, groups), behind the
    admin's Workflows pages; "view" opens them, "cancel" cancels one workflow."""

    class Meta:
        managed = False
        default_permissions = ("view",)
        permissions = [("cancel_workflow", "Can cancel a running workflow")]
        verbose_name = "workflow"
        verbose_name_plural = "workflows"

    def __str__(self) -> str:
        return f"workflow {self.pk}"


class Limit(models.Model):
    """Not a table: stands for the rate and concurrency limits in Redis, behind the
    admin's "Limits" page (its "view" permission opens it)."""

    class Meta:
        managed = False
        default_permissions = ("view",)
        verbose_name = "limit"
        verbose_name_plural = "limits"

    def __str__(self) -> str:
        return f"limit {self.pk}"


class OutboxMessage(models.Model):
    """A task dispatched inside a transaction, written in that transaction (the outbox).

    A rollback takes the row with it; a commit guarantees the task is queued: the
    committing process moves the row to Redis at once and deletes it, and whatever is
    left (Redis down, the process died) is flushed by the leader, oldest first
    (`core/outbox.py`). `body` is the message as it will be queued, so `message_id` is
    the task's id from the start.
    """

    message_id = models.CharField(max_length=255, unique=True)
    task_name = models.CharField(max_length=255)
    queue = models.CharField(max_length=100)
    shard = models.CharField(
        max_length=120, blank=True,
        help_text="The stream its unique lock or task_id lives in (blank: any shard).")
    lock_ttl_ms = models.BigIntegerField(
        default=0, help_text="The unique lock's TTL in ms (0: it takes no lock).")
    body = models.TextField(help_text="The message as queued (JSON).")
    created_at = models.DateTimeField(db_index=True)
    attempts = models.PositiveIntegerField(
        default=0, help_text="Flushes that met this row (and Redis down, or another flusher).")
    last_error = models.TextField(blank=True)

    class Meta:
        ordering = ["id"]
        default_permissions = ("view",)
        permissions = [("flush_outboxmessage", "Can flush the outbox now")]
        verbose_name = "outbox message"
        verbose_name_plural = "outbox messages"

    def __str__(self) -> str:
        return f"{self.task_name} ({self.message_id})"
