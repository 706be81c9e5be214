"""Every error the app raises, under one base class.

Where it fits, a class also inherits the built-in a caller would naturally catch
(`LookupError`, `ValueError`), as Django's own task framework does.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured


class TaskRunnerError(Exception):
    """Base class of every django-taskrunner error; do not raise it directly."""


class EmbeddedRedisUnavailable(TaskRunnerError, ImproperlyConfigured):
    """No Redis is configured and the embedded one cannot be started."""


class TaskNotFound(TaskRunnerError, LookupError):
    """No task is registered under the given name."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"no task named {name!r} is registered; is its app in INSTALLED_APPS "
            f"and is the task declared with @task in the app's tasks.py?"
        )
        self.task_name = name


class InvalidTaskPayload(TaskRunnerError, ValueError):
    """A payload is not JSON-serialisable (at dispatch) or not decodable (at the worker)."""

    def __init__(self, message: str, *, task_name: str | None = None) -> None:
        super().__init__(message)
        self.task_name = task_name


class InvalidTaskArguments(InvalidTaskPayload, TypeError):
    """Arguments of a Django Tasks framework task that cannot travel as JSON: a `TypeError`,
    as the framework's contract has it, and an `InvalidTaskPayload` like any other."""


class DuplicateStep(TaskRunnerError, ValueError):
    """`ctx.step` was called twice with the same name in one attempt (docs/steps.md)."""


class InvalidTaskOptions(TaskRunnerError, ValueError):
    """A `@task(...)` option or a per-dispatch override has a bad value."""


class UniqueForRequired(InvalidTaskOptions):
    """A unique task or dispatch was given no `unique_for` lock TTL."""


class TaskAlreadyDispatched(TaskRunnerError):
    """A unique dispatch found its lock held by another task."""

    def __init__(self, task_name: str, holder_id: str, lock_key: str) -> None:
        super().__init__(
            f"task {task_name!r} is already dispatched: lock {lock_key!r} is held by {holder_id!r}"
        )
        self.task_name = task_name
        self.holder_id = holder_id
        self.lock_key = lock_key


class TaskIdConflict(TaskRunnerError):
    """A dispatch named a `task_id` that another queued or running task holds."""

    def __init__(self, task_name: str, task_id: str, id_key: str) -> None:
        super().__init__(f"task id {task_id!r} is already taken in the queue (task {task_name!r})")
        self.task_name = task_name
        self.task_id = task_id
        self.holder_id = task_id
        self.id_key = id_key


class TaskExecutionError(TaskRunnerError):
    """A task failed for good: wraps what its last attempt raised (`.error`, also the
    `__cause__`), with the task's name and message id. FAILED_TASK_HANDLER receives it."""

    def __init__(self, task_name: str, error: BaseException, *,
                 message_id: str | None = None) -> None:
        named = f"task {task_name!r}"
        if message_id is not None:
            named += f" (id {message_id!r})"
        super().__init__(f"{named} failed: {type(error).__name__}: {error}")
        self.task_name = task_name
        self.message_id = message_id
        self.error = error
        self.__cause__ = error


class RedisUnavailable(TaskRunnerError, ConnectionError):
    """Redis could not be reached (connect or socket timeout, refused connection).

    `maybe_queued` is False when the task was certainly not queued (the connection was
    refused or never made, so nothing was sent), and True when that is unknown (a socket
    timeout or a lost connection after the command was sent: Redis may have queued it).
    Retry with the same `task_id` to be safe either way: `TaskIdConflict` then means the
    first attempt was queued.
    """

    def __init__(self, message: str, *, maybe_queued: bool = True) -> None:
        super().__init__(message)
        self.maybe_queued = maybe_queued


class UnreadableData(TaskRunnerError, ValueError):
    """A key in Redis holds what the app cannot read (a key of the wrong type, written by
    hand or by another program): the read is refused, the key left as it is."""

    def __init__(self, what: str, error: BaseException) -> None:
        super().__init__(f"{what}: its key in Redis cannot be read ({error})")
        self.__cause__ = error


class TimeLimitExceeded(TaskRunnerError):
    """An attempt ran past its task's `time_limit`; it counts as failed."""

    def __init__(self, task_name: str, time_limit: float, elapsed: float) -> None:
        super().__init__(
            f"task {task_name!r} ran {elapsed:.2f}s, past its time limit of {time_limit:g}s"
        )
        self.task_name = task_name
        self.time_limit = time_limit


class TaskExpired(TaskRunnerError):
    """The task was not started before its `expires` time (the reason of its failed row)."""


class WorkerLost(TaskRunnerError):
    """The worker running a task died each time it was delivered (a poison message)."""

    def __init__(self, task_name: str, deliveries: int, cause: str | None = None) -> None:
        if cause is None:
            text = (f"task {task_name!r} was delivered {deliveries} times and never finished: "
                    f"the worker running it died each time (killed, crashed or out of "
                    f"memory); it is not delivered again")
        else:  # a supervisor saw its child end: it says how (`runtasks --processes`)
            text = (f"task {task_name!r}: the worker process running attempt {deliveries} "
                    f"ended ({cause})")
        super().__init__(text)
        self.task_name = task_name
        self.deliveries = deliveries
        self.cause = cause
