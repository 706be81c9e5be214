"""The app's own tasks: the shim that runs Django Tasks framework tasks."""

from __future__ import annotations

import traceback
from typing import Any

from django.utils import timezone

from django_taskrunner.core.context import TaskContext
from django_taskrunner.core.task import task
from django_taskrunner.shim import SHIM_TASK


@task(name=SHIM_TASK, takes_context=True)
def run_django_task(ctx: TaskContext, payload: dict[str, Any]) -> Any:
    """Run one framework task and send its signals; its return value is the task
    record's result (the worker writes the outcome), the result id the task id.

    A message naming a `result_id` (queued by the previous release, or by an app that
    keeps no task records) keeps that JSON result record instead.
    """
    from django_taskrunner import backends
    from django_taskrunner.compat import TaskResultStatus, normalize_json, task_started

    backend = backends.backend_named(payload.get("backend"))
    framework_task = backends.task_from_path(payload.get("func"))  # checked before any import
    if "result_id" in payload:
        _run_with_result_record(backend, framework_task, payload)
        return None
    record = backends.new_record(framework_task, payload["backend"], payload["args"],
                                 payload["kwargs"])
    now = timezone.now().isoformat()
    record.update(status=str(TaskResultStatus.RUNNING), started_at=now, last_attempted_at=now,
                  worker_ids=[backends.worker_id()])
    result = backends.to_task_result(ctx.id, record, framework_task)
    task_started.send(type(backend), task_result=result)
    try:
        return_value = normalize_json(_call(framework_task, result, payload))
    except BaseException as exc:
        record.update(status=str(TaskResultStatus.FAILED), finished_at=timezone.now().isoformat(),
                      errors=[_error(exc)])
        _signal_finished(backend, ctx.id, record, framework_task)
        raise
    record.update(status=str(TaskResultStatus.SUCCESSFUL), return_value=return_value,
                  finished_at=timezone.now().isoformat())
    _signal_finished(backend, ctx.id, record, framework_task)
    return return_value


def _error(exc: BaseException) -> dict[str, str]:
    cls = type(exc)
    return {"exception_class_path": f"{cls.__module__}.{cls.__qualname__}",
            "traceback": "".join(traceback.format_exception(exc))}


def _signal_finished(backend: Any, result_id: str, record: dict[str, Any],
                     framework_task: Any) -> None:
    from django_taskrunner import backends
    from django_taskrunner.compat import task_finished

    task_finished.send(type(backend),
                       task_result=backends.to_task_result(result_id, record, framework_task))


def _run_with_result_record(backend: Any, framework_task: Any, payload: dict[str, Any]) -> None:
    """The previous release's shim: the JSON result record at `payload["result_id"]`."""
    from django_taskrunner import backends
    from django_taskrunner.compat import TaskResultStatus, normalize_json, task_started

    result_id = payload["result_id"]
    record = backends.load_record(result_id) or backends.new_record(
        framework_task, payload["backend"], payload["args"], payload["kwargs"])
    now = timezone.now().isoformat()
    record.update(status=str(TaskResultStatus.RUNNING), last_attempted_at=now)
    record["started_at"] = record["started_at"] or now
    record["worker_ids"].append(backends.worker_id())
    backends.save_record(result_id, record, backend.result_ttl)
    result = backends.to_task_result(result_id, record, framework_task)
    task_started.send(type(backend), task_result=result)
    try:
        return_value = normalize_json(_call(framework_task, result, payload))
    except BaseException as exc:
        record.update(status=str(TaskResultStatus.FAILED), finished_at=timezone.now().isoformat())
        record["errors"].append(_error(exc))
        _finish(backend, result_id, record, framework_task)
        raise
    record.update(status=str(TaskResultStatus.SUCCESSFUL), return_value=return_value,
                  finished_at=timezone.now().isoformat())
    _finish(backend, result_id, record, framework_task)


def _call(framework_task: Any, result: Any, payload: dict[str, Any]) -> Any:
    """The framework task's return value, called with its context when it takes one."""
    from django_taskrunner.compat import TaskContext

    if framework_task.takes_context:
        return framework_task.call(TaskContext(task_result=result), *payload["args"],
                                   **payload["kwargs"])
    return framework_task.call(*payload["args"], **payload["kwargs"])


def _finish(backend: Any, result_id: str, record: dict[str, Any], framework_task: Any) -> None:
    """Save the finished record and send `task_finished` with its result."""
    from django_taskrunner import backends
    from django_taskrunner.compat import task_finished

    backends.save_record(result_id, record, backend.result_ttl)
    task_finished.send(type(backend),
                       task_result=backends.to_task_result(result_id, record, framework_task))
