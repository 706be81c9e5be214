"""Step: find the message's task in the registry, or record it as failed (TaskNotFound)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django_taskrunner.core import unique as locks
from django_taskrunner.core.registry import registry
from django_taskrunner.exceptions import TaskNotFound
from django_taskrunner.worker.steps.run import Run

if TYPE_CHECKING:
    from django_taskrunner.worker.executor import Executor


def look_up_task(executor: Executor, run: Run) -> bool:
    """Set `run.task`; False after recording a message no registered task has the name of."""
    assert run.message is not None
    run.task = registry.find(run.message.task_name)
    if run.task is None:
        executor.record_and_ack(run, TaskNotFound(run.message.task_name), attempts=0,
                                event=locks.DROPPED)
        return False
    return True
