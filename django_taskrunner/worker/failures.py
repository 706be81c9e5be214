"""Recording a task that failed for good: the `FailedTask` row, then the user's hook."""

from __future__ import annotations

import json
import logging
import traceback as tb
from typing import Any

from django.db import IntegrityError
from django.utils import timezone
from django.utils.module_loading import import_string

from django_taskrunner.conf import get_settings
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.exceptions import TaskExecutionError
from django_taskrunner.models import FailedTask
from django_taskrunner.shim import shown_name

logger = logging.getLogger(__name__)


def describe_error(error: BaseException) -> tuple[str, str]:
    """(error class, one-line message) of an exception."""
    cls = type(error)
    builtin = cls.__module__ == "builtins"
    name = cls.__qualname__ if builtin else f"{cls.__module__}.{cls.__qualname__}"
    return name, f"{cls.__name__}: {error}"


def payload_text(message: TaskMessage) -> str:
    try:
        return json.dumps(message.payload, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return repr(message.payload)


def record_failure(
    message: TaskMessage, error: BaseException, *, attempts: int, worker: str,
    traceback: str | None = None, payload: str | None = None, task_raised: bool = False,
) -> None:
    """Write the `FailedTask` row (once per dispatch), then call FAILED_TASK_HANDLER.

    The row describes `error` itself. With `task_raised` (`error` is what the task's last
    attempt raised, or its time limit) the handler receives it wrapped in a
    `TaskExecutionError`; otherwise (the task never ran to an exception: undecodable,
    unknown, expired, its worker died each time) the app's own error as it is.

    A row already written for this dispatch (same message id and dispatch token: a replay
    after a crash) is kept as is, and the handler is not called again. A `task_id`
    dispatched again has another token, so its failure gets a row of its own.
    """
    error_class, error_text = describe_error(error)
    if traceback is None:
        traceback = "".join(tb.format_exception(error))
    name = shown_name(message.task_name, message.payload)  # a framework task's own path
    created = _write_row(message, {
        "task_name": name[:255],
        "queue": message.queue[:100],
        "payload": payload if payload is not None else payload_text(message),
        "error_class": error_class[:255],
        "error": error_text,
        "traceback": traceback,
        "attempts": attempts,
        "worker": worker[:255],
        "failed_at": timezone.now(),
    })
    # With the exception, so its traceback reaches log files and Sentry.
    logger.error(
        "task failed for good: task=%s id=%s queue=%s attempts=%d error=%s",
        name, message.id, message.queue, attempts, error_text, exc_info=error,
        extra={"task_name": name, "task_id": message.id, "queue": message.queue},
    )
    if created:
        call_failed_task_handler(message, execution_error(message, error) if task_raised
                                 else error)


def _write_row(message: TaskMessage, fields: dict[str, Any]) -> bool:
    """Create the row of this dispatch unless it exists; True if this call created it."""
    try:
        _row, created = FailedTask.objects.get_or_create(
            message_id=message.id, dispatch_token=message.dispatch_token or "",
            defaults=fields)
    except IntegrityError:  # another worker wrote it between our get and create
        return False
    return bool(created)


def execution_error(message: TaskMessage, error: BaseException) -> TaskExecutionError:
    """What a caller meets when the task of `message` failed for good with `error`."""
    return TaskExecutionError(message.task_name, error, message_id=message.id)


def call_failed_task_handler(message: TaskMessage, error: BaseException) -> None:
    """Run FAILED_TASK_HANDLER; its own errors are logged, never raised into the worker."""
    path = get_settings().FAILED_TASK_HANDLER
    if not path:
        return
    try:
        handler: Any = import_string(path)
        handler(message, error)
    except Exception:
        logger.exception("FAILED_TASK_HANDLER %s raised for task=%s id=%s queue=%s", path,
                         message.task_name, message.id, message.queue)
