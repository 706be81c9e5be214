"""Tasks of the admin-pages benchmark: never run, only listed."""

from __future__ import annotations

from typing import Any

from django_taskrunner import task


@task(queue="default")
def send_receipt(payload: Any) -> None:
    """Stands for a task that failed or waits."""


@task(queue="default", unique=True, unique_for=3600, unique_key=lambda p: str(p["order"]))
def sync_order(payload: Any) -> None:
    """A unique task: each dispatch holds a lock."""
