"""The outbox table as the rest of the package reads it: a row as the mover needs it,
the row of one task, the figures (size, oldest age) the dashboard, the metrics and the
system check show.

`core/` sits below `models` in the package's layers, so the model is reached through
Django's app registry when a function runs (`apps.get_model`), never imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.apps import apps
from django.db import DEFAULT_DB_ALIAS
from django.db.models import Count, Min
from django.utils import timezone


@dataclass(frozen=True)
class Row:
    """One outbox row, as the mover needs it."""

    pk: int
    message_id: str
    task_name: str
    queue: str
    shard: str
    lock_ttl_ms: int
    body: str

    @classmethod
    def of(cls, row: Any) -> Row:
        return cls(row.pk, row.message_id, row.task_name, row.queue, row.shard,
                   int(row.lock_ttl_ms), row.body)


def outbox_model() -> Any:
    """The `OutboxMessage` model (django_taskrunner.models)."""
    return apps.get_model("django_taskrunner", "OutboxMessage")


def failed_model() -> Any:
    """The `FailedTask` model (django_taskrunner.models)."""
    return apps.get_model("django_taskrunner", "FailedTask")


@dataclass(frozen=True)
class OutboxFigures:
    """How many rows wait in the outbox, and since when the oldest does."""

    count: int
    oldest: datetime | None

    @property
    def oldest_age(self) -> float:
        """Seconds the oldest row has waited (0.0 for an empty outbox)."""
        if self.oldest is None:
            return 0.0
        return max(0.0, (timezone.now() - self.oldest).total_seconds())


def figures(using: str = DEFAULT_DB_ALIAS) -> OutboxFigures:
    """Count and oldest creation time of the rows, one aggregate query."""
    from_db = outbox_model().objects.using(using).aggregate(count=Count("id"),
                                                            oldest=Min("created_at"))
    return OutboxFigures(int(from_db["count"] or 0), from_db["oldest"])


def waiting_fields(task_id: str, using: str = DEFAULT_DB_ALIAS) -> dict[str, str] | None:
    """A task still in the outbox as the fields of a "queued" record (`core/records.py`
    reads them), or None when no row holds that id."""
    row = (outbox_model().objects.using(using).filter(message_id=task_id)
           .values("task_name", "queue", "created_at").first())
    if row is None:
        return None
    return {"s": "queued", "t": row["task_name"], "q": row["queue"], "a": "1",
            "d": str(int(row["created_at"].timestamp() * 1000))}
