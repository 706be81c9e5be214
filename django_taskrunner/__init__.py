"""django-taskrunner: background tasks for Django on Redis Streams.

The public API; everything else is internal.
"""

from __future__ import annotations

import sys

from django_taskrunner.core.context import TaskContext
from django_taskrunner.core.dispatch import (
    dispatch,
    dispatch_delayed,
    dispatch_many,
    dispatch_on_commit,
    schedule_for,
)
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.core.pauses import pause_queue, paused_queues, resume_queue
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
    UnreadableData,
    WorkerLost,
)
from django_taskrunner.old_paths import install as _install_old_paths
from django_taskrunner.scheduling.election import LeaderElection
from django_taskrunner.signals import (
    dispatch_on,
    task_failed,
    task_retried,
    task_started,
    task_succeeded,
)
from django_taskrunner.stats.figures import get_health, get_leader, get_stats
from django_taskrunner.store.connection import get_redis
from django_taskrunner.worker.interrupt import TaskInterrupted

_install_old_paths(sys.modules[__name__])  # the first release's module paths (old_paths.py)

__version__ = "0.1.0"

__all__ = [
    "DuplicateStep",
    "InvalidTaskOptions",
    "InvalidTaskPayload",
    "LeaderElection",
    "RedisUnavailable",
    "UnreadableData",
    "Task",
    "TaskAlreadyDispatched",
    "TaskContext",
    "TaskExecutionError",
    "TaskIdConflict",
    "TaskInterrupted",
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
    "get_health",
    "get_leader",
    "get_redis",
    "get_stats",
    "lookup",
    "pause_queue",
    "paused_queues",
    "payload_key",
    "register_task",
    "resume_queue",
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

