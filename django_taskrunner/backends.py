"""A backend for Django's Tasks framework, so `@django.tasks.task` functions run on `runtasks`.

    TASKS = {"default": {"BACKEND": "django_taskrunner.backends.TaskRunnerBackend",
                         "QUEUES": ["default"], "OPTIONS": {"RESULT_TTL": 86400}}}

`enqueue()` dispatches one internal task, `django_taskrunner.run_django_task`, whose
payload names the framework task by module path with its args and kwargs (Huey's
"shim" approach). A task with a future `run_after` waits in its queue's delayed set
like any delayed task. Results live in Redis (`<prefix>:result:<id>`) for RESULT_TTL
seconds.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import uuid
from datetime import datetime
from typing import Any

from django.apps import apps
from django.core import checks
from django.utils import timezone
from django.utils.module_loading import import_string

from django_taskrunner.checks import QUEUE_NAME
from django_taskrunner.compat import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
    task_enqueued,
)
from django_taskrunner.core import clock, due
from django_taskrunner.core.dispatch import REDIS_DOWN, add_delayed, new_message
from django_taskrunner.core.registry import registry
from django_taskrunner.exceptions import InvalidTaskPayload
from django_taskrunner.shim import SHIM_TASK, TASK_PATH
from django_taskrunner.store import sharding
from django_taskrunner.store.connection import built_client
from django_taskrunner.store.errors import unavailable
from django_taskrunner.store.results import get_results

DEFAULT_RESULT_TTL = 24 * 3600


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _when(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


class TaskRunnerBackend(BaseTaskBackend):
    """Runs Django Tasks framework tasks on django-taskrunner's streams."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = False

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.result_ttl = self.options.get("RESULT_TTL", DEFAULT_RESULT_TTL)

    def validate_task(self, task: Task) -> None:
        super().validate_task(task)
        if not QUEUE_NAME.match(task.queue_name):
            raise InvalidTask(
                f"Queue {task.queue_name!r} is not a valid queue name for django-taskrunner "
                f"(letters, digits, '.', '_', '-')."
            )

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Queue the task: at once, or in the delayed set until a future `run_after`.

        The result record is written before the message, so a worker always finds it.
        """
        self.validate_task(task)
        result_id = uuid.uuid4().hex
        record = new_record(task, self.alias, list(args), dict(kwargs))
        payload = {"result_id": result_id, "backend": self.alias, "func": task.module_path,
                   "args": record["args"], "kwargs": record["kwargs"]}
        due_ms = None if task.run_after is None else due.due_from_when(task.run_after)
        if due_ms is not None and due_ms <= clock.now_ms():
            due_ms = None  # a run_after already past runs at once
        message = new_message(registry.get(SHIM_TASK), payload, queue=task.queue_name,
                              start_ms=due_ms)
        body = message.to_json()  # raises InvalidTaskPayload for args that are not JSON
        try:
            if due_ms is None:
                self._write_now(result_id, record, message.queue, body)
            else:
                save_record(result_id, record, self.result_ttl + _seconds_until(due_ms))
                add_delayed(message, due_ms)
        except REDIS_DOWN as exc:
            raise unavailable(f"cannot enqueue {task.module_path!r}", exc,
                              built_client()) from exc
        result = to_task_result(result_id, record, task)
        task_enqueued.send(type(self), task_result=result)
        return result

    def _write_now(self, result_id: str, record: dict[str, Any], queue: str, body: str) -> None:
        """The record and the stream message in one round trip, the record first."""
        get_results().save_and_add(result_id, json.dumps(record), self.result_ttl,
                                   sharding.next_shard(queue), body)

    def get_result(self, result_id: str) -> TaskResult:
        record = load_record(result_id)
        if record is None:
            raise TaskResultDoesNotExist(result_id)
        task = resolve_task(record["func"])
        return to_task_result(result_id, record, task)

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        errors: list[checks.CheckMessage] = []
        ttl = self.result_ttl
        if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 1:
            errors.append(checks.Error(
                f"TASKS[{self.alias!r}]['OPTIONS']['RESULT_TTL'] must be seconds >= 1, "
                f"not {ttl!r}", id="taskrunner.E010"))
        for queue in self.queues:
            if not QUEUE_NAME.match(queue):
                errors.append(checks.Error(
                    f"TASKS[{self.alias!r}] queue {queue!r} is not a valid queue name",
                    id="taskrunner.E010"))
        return errors


def backend_named(alias: Any) -> TaskRunnerBackend:
    """The `TASKS` backend a message names, refused unless it is one of ours."""
    known = isinstance(alias, str) and alias in task_backends.settings
    if not known or not isinstance(task_backends[alias], TaskRunnerBackend):
        raise InvalidTaskPayload(
            f"refusing to run a framework task for backend {alias!r}: it is not a "
            f"TaskRunnerBackend in TASKS", task_name=SHIM_TASK)
    return task_backends[alias]


def resolve_task(path: Any) -> Task:
    """The framework task at `path`, or `InvalidTaskPayload`; never imports a stranger.

    A message or a result record is data anyone who can write to Redis can forge, so a
    path is imported only when its module is already imported (the autodiscovered tasks
    modules) or lies inside an installed app; what it names must then be a framework task.
    """
    if not isinstance(path, str) or not TASK_PATH.fullmatch(path):
        raise _refused(path, "it is not a dotted module path")
    module_name = path.rpartition(".")[0]
    if module_name not in sys.modules and not _in_installed_app(module_name):
        raise _refused(path, "its module is neither imported nor inside an installed app")
    try:
        framework_task = import_string(path)
    except ImportError as exc:
        raise _refused(path, f"it cannot be imported: {exc}") from exc
    if not isinstance(framework_task, Task):
        raise _refused(path, "it is not a Django Tasks framework task")
    return framework_task


def _in_installed_app(module_name: str) -> bool:
    return any(module_name == config.name or module_name.startswith(config.name + ".")
               for config in apps.get_app_configs())


def _refused(path: Any, reason: str) -> InvalidTaskPayload:
    return InvalidTaskPayload(f"refusing to run framework task {path!r}: {reason}",
                              task_name=SHIM_TASK)


def _seconds_until(due_ms: int) -> int:
    """Whole seconds from now to `due_ms`: a deferred record must outlive its wait."""
    return max(0, -(-(due_ms - clock.now_ms()) // 1000))


def new_record(task: Task, alias: str, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    return {
        "func": task.module_path, "queue": task.queue_name, "backend": alias,
        "priority": task.priority, "run_after": _iso(task.run_after),
        "status": str(TaskResultStatus.READY),
        "enqueued_at": _iso(timezone.now()), "started_at": None, "finished_at": None,
        "last_attempted_at": None, "args": args, "kwargs": kwargs, "errors": [],
        "worker_ids": [], "return_value": None,
    }


def load_record(result_id: str) -> dict[str, Any] | None:
    raw = get_results().load(result_id)
    return json.loads(raw) if raw is not None else None


def save_record(result_id: str, record: dict[str, Any], ttl: int) -> None:
    get_results().save(result_id, json.dumps(record), ttl)


def to_task_result(result_id: str, record: dict[str, Any], task: Task) -> TaskResult:
    """A framework `TaskResult` from a stored record."""
    result = TaskResult(
        task=task.using(queue_name=record["queue"], backend=record["backend"],
                        run_after=_when(record.get("run_after"))),
        id=result_id,
        status=TaskResultStatus(record["status"]),
        enqueued_at=_when(record["enqueued_at"]),
        started_at=_when(record["started_at"]),
        finished_at=_when(record["finished_at"]),
        last_attempted_at=_when(record["last_attempted_at"]),
        args=record["args"],
        kwargs=record["kwargs"],
        backend=record["backend"],
        errors=[TaskError(exception_class_path=e["exception_class_path"],
                          traceback=e["traceback"]) for e in record["errors"]],
        worker_ids=list(record["worker_ids"]),
    )
    object.__setattr__(result, "_return_value", record["return_value"])
    return result


def worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"
