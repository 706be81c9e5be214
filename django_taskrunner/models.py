"""Database models: `FailedTask`, one row per task that failed for good."""

from __future__ import annotations

import json

from django.db import models


class FailedTask(models.Model):
    """A task that failed after its last retry, or a message that could not be run.

    Written idempotently: `message_id` is unique, so a crash that replays the message
    after the row was written does not write a second row.
    """

    task_name = models.CharField(max_length=255, db_index=True)
    queue = models.CharField(max_length=100, db_index=True)
    message_id = models.CharField(max_length=255, unique=True)
    payload = models.TextField(blank=True, help_text="The payload as JSON, or the raw message.")
    error_class = models.CharField(max_length=255, blank=True, db_index=True)
    error = models.TextField(blank=True)
    traceback = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=0)
    worker = models.CharField(max_length=255, blank=True)
    failed_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-failed_at", "-id"]
        verbose_name = "failed task"
        verbose_name_plural = "failed tasks"

    def __str__(self) -> str:
        return f"{self.task_name} ({self.message_id})"

    def payload_value(self) -> object:
        """The payload decoded from JSON; raises ValueError if it was not JSON."""
        return json.loads(self.payload)
