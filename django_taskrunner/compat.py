"""Django's Tasks framework: `django.tasks` (Django 6+) or the `django-tasks` backport.

The one module that knows which is installed; everything else imports from here.
"""

from __future__ import annotations

try:  # Django 6 and newer
    from django.tasks import task, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    FRAMEWORK = "django.tasks"
except ImportError:  # Django 5.2 with the backport (pip install django-tasks)
    from django_tasks import task, task_backends  # type: ignore[no-redef]
    from django_tasks.backends.base import BaseTaskBackend  # type: ignore[no-redef]
    from django_tasks.base import (  # type: ignore[no-redef]
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django_tasks.exceptions import InvalidTaskError as InvalidTask  # type: ignore[no-redef]
    from django_tasks.exceptions import TaskResultDoesNotExist  # type: ignore[no-redef]
    from django_tasks.signals import (  # type: ignore[no-redef]
        task_enqueued,
        task_finished,
        task_started,
    )
    from django_tasks.utils import normalize_json  # type: ignore[no-redef]

    FRAMEWORK = "django_tasks"

__all__ = [
    "FRAMEWORK",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "normalize_json",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
