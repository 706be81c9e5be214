"""django-taskrunner: background tasks for Django on Redis Streams.

The public API; everything else is internal.
"""

from __future__ import annotations

from django_taskrunner.core.context import TaskContext
from django_taskrunner.core.dispatch import (
    dispatch,
    dispatch_delayed,
    dispatch_many,
    dispatch_on_commit,
    schedule_for,
)
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.core.records import TaskRecord, cancel, lookup, wait
from django_taskrunner.core.registry import register_task
from django_taskrunner.core.task import Task, task
from django_taskrunner.core.unique import payload_key
from django_taskrunner.core.workflows import (
    WorkflowRecord,
    cancel_workflow,
    chain,
    group,
    lookup_workflow,
)
from django_taskrunner.exceptions import (
    DuplicateStep,
    InvalidTaskOptions,
    InvalidTaskPayload,
    RedisUnavailable,
    TaskAlreadyDispatched,
    TaskExecutionError,
    TaskIdConflict,
    TaskNotFound,
    TaskRunnerError,
    TimeLimitExceeded,
    UniqueForRequired,
    WorkerLost,
)
from django_taskrunner.hooks import dispatch_on
from django_taskrunner.signals import task_failed, task_retried, task_started, task_succeeded

__version__ = "0.1.0"

__all__ = [
    "DuplicateStep",
    "InvalidTaskOptions",
    "InvalidTaskPayload",
    "RedisUnavailable",
    "Task",
    "TaskAlreadyDispatched",
    "TaskContext",
    "TaskExecutionError",
    "TaskIdConflict",
    "TaskMessage",
    "TaskNotFound",
    "TaskRecord",
    "TaskRunnerError",
    "TimeLimitExceeded",
    "UniqueForRequired",
    "WorkerLost",
    "WorkflowRecord",
    "cancel",
    "dispatch",
    "dispatch_delayed",
    "dispatch_many",
    "dispatch_on",
    "dispatch_on_commit",
    "lookup",
    "payload_key",
    "register_task",
    "schedule_for",
    "task",
    "task_failed",
    "task_retried",
    "task_started",
    "task_succeeded",
    "wait",
    "cancel_workflow",
    "chain",
    "group",
    "lookup_workflow",
]

