"""A backend for Django's Tasks framework, so `@django.tasks.task` functions run on `runtasks`.

    TASKS = {"default": {"BACKEND": "django_taskrunner.backends.TaskRunnerBackend",
                         "QUEUES": ["default"], "OPTIONS": {"RESULT_TTL": 86400}}}

`enqueue()` dispatches one internal task, `django_taskrunner.run_django_task`, whose
payload names the framework task by module path with its args and kwargs (Huey's
"shim" approach). A task with a future `run_after` waits in its queue's delayed set
like any delayed task. A result is the task's record (`core/records.py`: the result id
is the message id), with a field of its own (`FRAMEWORK_FIELD`) holding what the
framework's `TaskResult` needs and the record does not (path, args, kwargs, backend),
kept RESULT_TTL seconds once finished. With the app's records off (`RESULT_TTL = 0`)
results are JSON records at `<prefix>:result:<id>`, as in the previous release, whose
records `get_result()` still reads.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sys
import uuid
from dataclasses import replace
from datetime import datetime
from typing import Any

from django.apps import apps
from django.core import checks
from django.utils import timezone
from django.utils.module_loading import import_string

from django_taskrunner.compat import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_backends,
    task_enqueued,
)
from django_taskrunner.conf import QUEUE_NAME
from django_taskrunner.core import clock, dispatch, sharding
from django_taskrunner.core.dispatch import new_message
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.core.options import DEFAULT_PRIORITY
from django_taskrunner.core.records import TaskRecord, dispatch_record, from_fields, records
from django_taskrunner.core.registry import registry
from django_taskrunner.core.sending import add_delayed, add_fair, announce_queue
from django_taskrunner.exceptions import InvalidTaskArguments, InvalidTaskPayload
from django_taskrunner.shim import SHIM_TASK, TASK_PATH
from django_taskrunner.store import get_store, keys
from django_taskrunner.store.connection import built_client
from django_taskrunner.store.errors import REDIS_DOWN, unavailable

DEFAULT_RESULT_TTL = 24 * 3600
# The record field holding the framework's own part of a result (JSON).
FRAMEWORK_FIELD = "fw"
# A task record's status as the framework's `TaskResultStatus` (a retrying task waits
# for its next attempt; expired and cancelled ones never finish their work).
STATUS_MAP = {
    "delayed": TaskResultStatus.READY, "queued": TaskResultStatus.READY,
    "retrying": TaskResultStatus.READY, "running": TaskResultStatus.RUNNING,
    "succeeded": TaskResultStatus.SUCCESSFUL, "failed": TaskResultStatus.FAILED,
    "expired": TaskResultStatus.FAILED, "cancelled": TaskResultStatus.FAILED,
}


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _when(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def level_for(priority: int) -> int:
    """The priority level (0..9, `@task(priority=...)`'s) of a framework task's priority
    (-100..100, higher first): 0 is the default level 5; 1..100 go to 6..9 by quarters
    and -1..-100 to 4..0 by fifths, so the framework's order is kept."""
    if priority > 0:
        return DEFAULT_PRIORITY + math.ceil(priority / 25)
    if priority < 0:
        return DEFAULT_PRIORITY - math.ceil(-priority / 20)
    return DEFAULT_PRIORITY


class TaskRunnerBackend(BaseTaskBackend):
    """Runs Django Tasks framework tasks on django-taskrunner's streams."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.result_ttl = self.options.get("RESULT_TTL", DEFAULT_RESULT_TTL)
        # Fair queues: OPTIONS["FAIR_KEY"], a callable (or its dotted path)
        # `(task, args, kwargs) -> str | None` naming the key a task waits its turn with.
        fair_key = self.options.get("FAIR_KEY")
        self.fair_key = import_string(fair_key) if isinstance(fair_key, str) else fair_key

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
        due_ms = None if task.run_after is None else dispatch.due_from_when(task.run_after)
        if due_ms is not None and due_ms <= clock.now_ms():
            due_ms = None  # a run_after already past runs at once
        shim = registry.get(SHIM_TASK)
        # The framework's own normalisation first: its TypeError for what is not JSON.
        record = new_record(task, self.alias, normalize_json(list(args)),
                            normalize_json(dict(kwargs)))
        payload = {"backend": self.alias, "func": task.module_path, "args": record["args"],
                   "kwargs": record["kwargs"], "result_ttl": self.result_ttl}
        message, body = _encoded(task, shim, payload, due_ms,
                                 self.fair_key and self.fair_key(task, args, kwargs))
        record["enqueued_at"] = _iso(message.dispatched_at)  # the stored precision
        shard = keys.level_name(sharding.next_shard(message.queue), message.priority)
        write = dispatch_record(message, shim, shard, due_ms)
        if write is None:  # the app keeps no task records: a result record of its own
            return self._enqueue_without_records(task, record, payload, due_ms,
                                                message.fair_key)
        try:
            broker = get_store().streams
            fields = (*write.fields, (FRAMEWORK_FIELD, framework_part(record)))
            if due_ms is None and message.fair_key is not None:  # waits for its turn
                add_fair(broker, shard, [message], [body], [replace(write, fields=fields)])
            elif due_ms is None:
                broker.add(shard, body, replace(write, fields=fields))
            else:
                broker.add_delayed(shard, body, due_ms, replace(write, fields=fields))
            announce_queue(broker, message.queue)
        except REDIS_DOWN as exc:
            raise unavailable(f"cannot enqueue {task.module_path!r}", exc,
                              built_client()) from exc
        result = to_task_result(message.id, record, task)
        task_enqueued.send(type(self), task_result=result)
        return result

    def _enqueue_without_records(self, task: Task, record: dict[str, Any],
                                 payload: dict[str, Any], due_ms: int | None,
                                 fair_key: str | None = None) -> TaskResult:
        """The previous release's way: a JSON result record under a random result id,
        written before the message, which names it (`result_id`)."""
        result_id = uuid.uuid4().hex
        payload = {**payload, "result_id": result_id}
        message, body = _encoded(task, registry.get(SHIM_TASK), payload, due_ms, fair_key)
        record["enqueued_at"] = _iso(message.dispatched_at)
        if message.fair_key is not None and due_ms is None:
            due_ms = clock.now_ms()  # through the delayed set: it joins its key's turn
        try:
            if due_ms is None:
                self._write_now(result_id, record, message, body)
                announce_queue(get_store().streams, message.queue)
            else:
                save_record(result_id, record, self.result_ttl + _seconds_until(due_ms))
                add_delayed(message, due_ms)
        except REDIS_DOWN as exc:
            raise unavailable(f"cannot enqueue {task.module_path!r}", exc,
                              built_client()) from exc
        result = to_task_result(result_id, record, task)
        task_enqueued.send(type(self), task_result=result)
        return result

    def _write_now(self, result_id: str, record: dict[str, Any], message: TaskMessage,
                   body: str) -> None:
        """The record and the stream message in one round trip, the record first."""
        shard = keys.level_name(sharding.next_shard(message.queue), message.priority)
        get_store().results.save_and_add(result_id, json.dumps(record), self.result_ttl, shard,
                                          body)

    def get_result(self, result_id: str) -> TaskResult:
        """The result from the task's record, or from a result record of the previous
        release (or of an app keeping no task records)."""
        record = load_record(result_id)
        if record is None:
            raise TaskResultDoesNotExist(result_id)
        task = task_from_path(record["func"])
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


def _encoded(task: Task, shim: Any, payload: dict[str, Any], due_ms: int | None,
             fair_key: str | None = None) -> tuple[TaskMessage, str]:
    """The shim's message for `task` and its wire form; a payload refused (too deep, too
    large) raises `InvalidTaskArguments`, a `TypeError` as the framework's contract has it,
    naming the user's function rather than the shim."""
    try:
        message = new_message(shim, payload, queue=task.queue_name, start_ms=due_ms,
                              priority=level_for(task.priority), fair_key=fair_key)
        return message, message.to_json()
    except InvalidTaskPayload as exc:
        text = str(exc).replace(repr(SHIM_TASK), repr(task.module_path))
        raise InvalidTaskArguments(text, task_name=task.module_path) from exc


def backend_named(alias: Any) -> TaskRunnerBackend:
    """The `TASKS` backend a message names, refused unless it is one of ours."""
    known = isinstance(alias, str) and alias in task_backends.settings
    if not known or not isinstance(task_backends[alias], TaskRunnerBackend):
        raise InvalidTaskPayload(
            f"refusing to run a framework task for backend {alias!r}: it is not a "
            f"TaskRunnerBackend in TASKS", task_name=SHIM_TASK)
    return task_backends[alias]


def task_from_path(path: Any) -> Task:
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
                              task_name=path if isinstance(path, str) else SHIM_TASK)


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


def framework_part(record: dict[str, Any]) -> str:
    """The JSON of what a task record keeps for the framework (`FRAMEWORK_FIELD`)."""
    return json.dumps({name: record[name] for name in
                       ("func", "backend", "args", "kwargs", "priority", "run_after")})


def load_record(result_id: str) -> dict[str, Any] | None:
    """The framework record of `result_id`: read from its task record, else from a
    result record (`store/records.py`); None when neither exists."""
    if not isinstance(result_id, str) or not result_id:
        return None
    fields = records().load(result_id)
    if fields is not None and FRAMEWORK_FIELD in fields:
        return from_task_record(from_fields(result_id, fields), fields)
    raw = get_store().results.load(result_id)
    return json.loads(raw) if raw is not None else None


def from_task_record(task_record: TaskRecord, fields: dict[str, str]) -> dict[str, Any]:
    """The framework record a task record stands for (the shape `new_record` builds)."""
    try:
        part = json.loads(fields[FRAMEWORK_FIELD])
    except ValueError:
        part = {}
    if not isinstance(part, dict):
        part = {}
    status = STATUS_MAP.get(task_record.status, TaskResultStatus.READY)
    errors = []
    if status == TaskResultStatus.FAILED and task_record.error is not None:
        errors.append({"exception_class_path": fields.get("ec") or "builtins.Exception",
                       "traceback": task_record.traceback or task_record.error})
    return {
        "func": part.get("func"), "queue": task_record.queue,
        "backend": part.get("backend", ""), "priority": part.get("priority", 0),
        "run_after": part.get("run_after"), "status": str(status),
        "enqueued_at": _iso(task_record.dispatched_at),
        "started_at": _iso(task_record.started_at),
        "finished_at": _iso(task_record.finished_at),
        "last_attempted_at": _iso(task_record.started_at),
        "args": part.get("args", []), "kwargs": part.get("kwargs", {}), "errors": errors,
        "worker_ids": [task_record.worker] if task_record.worker else [],
        "return_value": task_record.result,
    }


def save_record(result_id: str, record: dict[str, Any], ttl: int) -> None:
    get_store().results.save(result_id, json.dumps(record), ttl)


def to_task_result(result_id: str, record: dict[str, Any], task: Task) -> TaskResult:
    """A framework `TaskResult` from a stored record."""
    result = TaskResult(
        task=task.using(queue_name=record["queue"], backend=record["backend"],
                        priority=record.get("priority", 0),
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
