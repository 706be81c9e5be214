"""Recording a task that failed for good: the `FailedTask` row, then the user's hook.

When the database refuses the row (it is down, or lacks the table), the failure is not
left pending: the row is kept in Redis (`store/rows.py`), the task's outcome goes
on as usual (record "failed", entry acked, no second run), and `flush_failed_rows()`
(the leader's `FailedRowsFlusher`, with backoff) writes it once the database answers.
The row is written once per dispatch either way (the same get-or-create).

`FailedRowsFlusher` is that writer: a thread the leader runs beside its scheduler
(`runner.py`). Every `INTERVAL_SECONDS` one HSCAN of the waiting rows (nothing more when
none wait); while the database refuses, it tries again after a wait that doubles up to
`MAX_BACKOFF_SECONDS`, logging the outage once and its end once. Two leaders for a moment
(a lease hand-over) write each row once: it is the same get-or-create of one row per
dispatch.
"""

from __future__ import annotations

import json
import logging
import threading
import traceback as tb
from typing import Any

from django.db import (
    DEFAULT_DB_ALIAS,
    DataError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    close_old_connections,
    connections,
)
from django.db import Error as DatabaseError
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.module_loading import import_string

from django_taskrunner.conf import get_settings
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.exceptions import TaskExecutionError
from django_taskrunner.models import FailedTask
from django_taskrunner.shim import shown_name
from django_taskrunner.store import get_store
from django_taskrunner.store.errors import REDIS_DOWN
from django_taskrunner.store.rows import FailedRows

logger = logging.getLogger(__name__)

INTERVAL_SECONDS = 1.0  # the flusher's turn
MAX_BACKOFF_SECONDS = 60.0


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
    fields = {
        "task_name": name[:255],
        "queue": message.queue[:100],
        "payload": payload if payload is not None else payload_text(message),
        "error_class": error_class[:255],
        "error": error_text,
        "traceback": traceback,
        "attempts": attempts,
        "worker": worker[:255],
        "failed_at": timezone.now(),
    }
    created = _write_or_keep(message, fields)
    # With the exception, so its traceback reaches log files and Sentry.
    logger.error(
        "task failed for good: task=%s id=%s queue=%s attempts=%d error=%s",
        name, message.id, message.queue, attempts, error_text, exc_info=error,
        extra={"task_name": name, "task_id": message.id, "queue": message.queue},
    )
    if created:
        call_failed_task_handler(message, execution_error(message, error) if task_raised
                                 else error)


def _write_or_keep(message: TaskMessage, fields: dict[str, Any]) -> bool:
    """`_write_row`, or the row kept in Redis when the database refuses it (True: the
    handler runs now, with the outcome, not when the row is written later)."""
    try:
        return _write_row(message, fields)
    except DatabaseError as error:
        keep_row(message, fields, error)
        return True


def _write_row(message: TaskMessage, fields: dict[str, Any]) -> bool:
    """Create the row of this dispatch unless it exists; True if this call created it."""
    try:
        _row, created = FailedTask.objects.get_or_create(
            message_id=message.id, dispatch_token=message.dispatch_token or "",
            defaults=fields)
    except IntegrityError:  # another worker wrote it between our get and create
        return False
    return bool(created)


def _row_id(message: TaskMessage) -> str:
    return f"{message.id}|{message.dispatch_token or ''}"


def keep_row(message: TaskMessage, fields: dict[str, Any], error: BaseException) -> None:
    """Keep the row the database refused in Redis, for `flush_failed_rows()` to write.

    Raises when Redis refuses too: the entry then stays pending, as before.
    """
    row = {**fields, "failed_at": fields["failed_at"].isoformat(),
           "message_id": message.id, "dispatch_token": message.dispatch_token or ""}
    failed_rows().keep(_row_id(message), json.dumps(row, ensure_ascii=False))
    logger.warning("task=%s id=%s: cannot write its FailedTask row (%s); it is kept in Redis "
                   "and written once the database answers", message.task_name, message.id,
                   error)


def failed_rows() -> FailedRows:
    return get_store().failed_rows


def flush_failed_rows(batch: int = 100) -> int:
    """Write the rows kept in Redis, up to about `batch`; how many were settled.

    A database that cannot be reached raises at once (nothing more is tried); a row the
    database refuses on its own (a `DataError`...) is kept and the others are written,
    then its error is raised: either way for the caller's backoff. A kept row that is not
    a row (written by another program) is logged whole and dropped.
    """
    store = failed_rows()
    settled: list[str] = []
    refused: DatabaseError | None = None
    try:
        for row_id, raw in store.batch(batch):
            try:
                _write_kept(row_id, raw)
            except (OperationalError, InterfaceError):
                raise
            except DatabaseError as error:
                refused = refused or error
                continue
            settled.append(row_id)
    finally:
        store.forget(settled)
    if refused is not None:
        raise refused
    return len(settled)


def _write_kept(row_id: str, raw: str) -> None:
    """Write one kept row (its JSON text), or log and drop what is not one."""
    try:
        fields = json.loads(raw)
        message_id, token = fields.pop("message_id"), fields.pop("dispatch_token")
        fields["failed_at"] = parse_datetime(fields["failed_at"])
    except (ValueError, KeyError, TypeError, AttributeError):
        logger.error("failed row %s in Redis is not a row; dropped: %r", row_id, raw)
        return
    try:
        _write_fields(message_id, token, fields)
    except DataError:
        if not any(isinstance(v, str) and "\x00" in v for v in fields.values()):
            raise
        # PostgreSQL text holds no NUL byte: the row shows it escaped instead.
        _write_fields(message_id, token, {
            name: value.replace("\x00", "\\x00") if isinstance(value, str) else value
            for name, value in fields.items()})


def _write_fields(message_id: str, token: str, fields: dict[str, Any]) -> None:
    try:
        FailedTask.objects.get_or_create(message_id=message_id, dispatch_token=token,
                                         defaults=fields)
    except IntegrityError:  # written meanwhile by a worker or another flush
        pass


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

class FailedRowsFlusher(threading.Thread):
    """Writes the kept failed rows until `stop()`."""

    def __init__(self, *, interval: float = INTERVAL_SECONDS) -> None:
        super().__init__(name="taskrunner-failed-rows", daemon=True)
        self.interval = interval
        self.written = 0  # rows settled so far
        self.failures = 0  # turns in a row the database (or Redis) refused
        self._stopping = threading.Event()

    def stop(self, timeout: float = 10.0) -> None:
        """Finish the current batch and end the thread."""
        self._stopping.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)

    def run(self) -> None:
        try:
            while not self._stopping.is_set():
                self.turn()
                wait = (self.interval if not self.failures else
                        min(MAX_BACKOFF_SECONDS, self.interval * 2 ** self.failures))
                self._stopping.wait(wait)
        finally:
            connections[DEFAULT_DB_ALIAS].close()

    def turn(self) -> None:
        """Write what waits, batch after batch; on a refusal, count it for the backoff."""
        close_old_connections()
        try:
            while (written := flush_failed_rows()) and not self._stopping.is_set():
                self._settled(written)
        except (DatabaseError, *REDIS_DOWN) as exc:
            if not self.failures:
                logger.warning("failed rows: cannot write the rows kept in Redis (%s); "
                               "retrying with backoff", exc)
            self.failures += 1
            close_old_connections()
        except Exception:
            logger.exception("failed rows: unexpected error; going on")
            self.failures += 1

    def _settled(self, written: int) -> None:
        self.written += written
        if self.failures:
            logger.warning("failed rows: the database answers again; writing the rows kept")
            self.failures = 0
        else:
            logger.info("failed rows: wrote %d FailedTask row(s) kept in Redis", written)
