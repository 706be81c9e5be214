"""The app's own tasks: the shim that runs Django Tasks framework tasks."""

from __future__ import annotations

import traceback
from typing import Any

from django.utils import timezone

from django_taskrunner.core.task import task
from django_taskrunner.shim import SHIM_TASK


@task(name=SHIM_TASK)
def run_django_task(payload: dict[str, Any]) -> None:
    """Run one framework task, keeping its result record and sending its signals."""
    from django_taskrunner import backends
    from django_taskrunner.compat import TaskResultStatus, normalize_json, task_started

    backend = backends.backend_named(payload.get("backend"))
    framework_task = backends.resolve_task(payload.get("func"))  # checked before any import
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
        cls = type(exc)
        record.update(status=str(TaskResultStatus.FAILED), finished_at=timezone.now().isoformat())
        record["errors"].append({"exception_class_path": f"{cls.__module__}.{cls.__qualname__}",
                                 "traceback": "".join(traceback.format_exception(exc))})
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
