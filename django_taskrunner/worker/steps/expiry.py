"""Step: a message not started before its `expires` time is recorded as failed, not run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django_taskrunner.core import clock
from django_taskrunner.core import unique as locks
from django_taskrunner.exceptions import TaskExpired
from django_taskrunner.worker.steps.run import Run

if TYPE_CHECKING:
    from django_taskrunner.worker.executor import Executor


def check_expiry(executor: Executor, run: Run) -> bool:
    """False after recording (and acking) an expired message."""
    message = run.message
    assert message is not None
    if message.expires_at_ms is None or clock.now_ms() <= message.expires_at_ms:
        return True
    error = TaskExpired(f"task {message.task_name!r} expired before it started")
    executor.record_and_ack(run, error, attempts=message.attempt - 1, event=locks.DROPPED)
    return False
