"""`@task` and `Task`: a function plus its options, checked when declared.

A bad option fails at import, so the mistake shows at start-up rather than at the
first dispatch. Calling a `Task` runs the function in-process, as a plain call (for an
`async def` task that call returns the coroutine, as calling the function does).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, overload

from django_taskrunner.conf import MAX_SECONDS
from django_taskrunner.core import dispatch as dispatching
from django_taskrunner.core import workflows
from django_taskrunner.core.cron import check_cron
from django_taskrunner.core.options import (
    TaskOptions,
    check_debounce,
    check_fair_options,
    check_limit_options,
    check_on_conflict,
    check_priority,
    check_queue_name,
    check_seconds,
    check_unique_for,
    check_unique_mode,
    is_finite,
)
from django_taskrunner.core.registry import registry
from django_taskrunner.exceptions import InvalidTaskOptions

if TYPE_CHECKING:
    from django_taskrunner.core.message import TaskMessage

logger = logging.getLogger(__name__)


def check_options(options: TaskOptions, task_name: str) -> None:
    """Raise `InvalidTaskOptions` (or `UniqueForRequired`) for a bad option."""
    if options.queue is not None:
        check_queue_name(options.queue)
    _check_retries(options)
    _check_timing(options)
    if options.unique_key is not None and not callable(options.unique_key):
        raise InvalidTaskOptions("unique_key must be a callable(payload) -> str, or None")
    check_unique_mode(options.unique_mode)
    ttl = options.result_ttl
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int)
                            or not 0 <= ttl <= MAX_SECONDS):
        raise InvalidTaskOptions(f"result_ttl must be an integer of seconds from 0 to "
                                 f"{MAX_SECONDS:,}, not {ttl!r}")
    check_debounce(options, task_name)
    debounced = options.unique_mode == "debounce"  # unique, its lock lives `debounce` s
    if options.unique and not debounced:
        check_unique_for(options.unique_for, task_name)
    elif options.unique_for is not None:
        check_unique_for(options.unique_for, task_name)
    check_limit_options(task_name, options.rate_limit, options.rate_key,
                        options.concurrency_limit, options.concurrency_key)
    check_on_conflict(options.on_conflict, task_name)
    check_priority(options.priority, task_name)
    check_fair_options(options.fair_key, options.fair_weight, task_name)
    if options.on_conflict != "raise" and not (options.unique or debounced):
        raise InvalidTaskOptions(f"task {task_name!r} is not unique, so on_conflict="
                                 f"{options.on_conflict!r} has no lock to meet: declare "
                                 f"unique=True (and unique_for) or leave on_conflict out")


def _check_retries(options: TaskOptions) -> None:
    """`max_retry` and `retry_backoff`."""
    if isinstance(options.max_retry, bool) or not isinstance(options.max_retry, int) or (
        options.max_retry < 0
    ):
        raise InvalidTaskOptions(f"max_retry must be an integer >= 0, not {options.max_retry!r}")
    backoff = options.retry_backoff
    if backoff is not None and not callable(backoff):
        if not is_finite(backoff) or not 0 <= backoff <= MAX_SECONDS:
            raise InvalidTaskOptions(
                f"retry_backoff must be finite seconds from 0 to {MAX_SECONDS:,} or a "
                f"callable(retry) -> seconds, not {backoff!r}"
            )


def _check_timing(options: TaskOptions) -> None:
    """The options in seconds, and the periodic schedule (`cron` or `schedule`)."""
    for name in ("reservation_timeout", "time_limit", "expires", "schedule"):
        check_seconds(name, getattr(options, name))
    if options.cron is not None:
        check_cron(options.cron)
    if options.cron is not None and options.schedule is not None:
        raise InvalidTaskOptions("give cron or schedule, not both")


@dataclass(frozen=True)
class Task:
    """A registered task: the function, its registry name and its options."""

    fn: Callable[..., Any]
    name: str
    options: TaskOptions = field(default_factory=TaskOptions)
    # An `async def` function: the worker awaits it on its event loop. Found once, here.
    is_async: bool = field(init=False, repr=False, compare=False, default=False)

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise InvalidTaskOptions(f"a task needs a callable, not {self.fn!r}")
        if inspect.isasyncgenfunction(self.fn) or inspect.isgeneratorfunction(self.fn):
            raise InvalidTaskOptions(
                f"task {self.name!r} is a generator function; a task must return (or, "
                f"declared with async def, be awaited to) its result, not yield")
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(self.fn))
        if not isinstance(self.name, str) or not self.name:
            raise InvalidTaskOptions(f"a task name must be a non-empty string, not {self.name!r}")
        check_options(self.options, self.name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the function here and now, as a plain call."""
        return self.fn(*args, **kwargs)

    def using(self, **changes: Any) -> Task:
        """A copy with some options changed (not registered)."""
        return replace(self, options=replace(self.options, **changes))

    def dispatch(self, payload: Any = None, **overrides: Any) -> TaskMessage:
        """Queue this task; see `django_taskrunner.core.dispatch.dispatch`."""
        return dispatching.dispatch(self, payload, **overrides)

    def dispatch_many(self, payloads: Iterable[Any], **overrides: Any) -> list[TaskMessage]:
        """Queue one task per payload in one round trip."""
        return dispatching.dispatch_many(self, payloads, **overrides)

    def dispatch_on_commit(self, payload: Any = None, **overrides: Any) -> TaskMessage | None:
        """Queue this task once the current database transaction commits (through the
        outbox by default: returns its message; see `dispatch_on_commit`)."""
        return dispatching.dispatch_on_commit(self, payload, **overrides)

    def dispatch_delayed(
        self, payload: Any = None, *, delay: float | timedelta, **overrides: Any
    ) -> TaskMessage:
        """Queue this task to start after `delay` (seconds or a timedelta)."""
        return dispatching.dispatch_delayed(self, payload, delay=delay, **overrides)

    def schedule_for(self, payload: Any = None, *, when: datetime, **overrides: Any) -> TaskMessage:
        """Queue this task to start at `when`."""
        return dispatching.schedule_for(self, payload, when=when, **overrides)

    def s(self, payload: Any = None, **options: Any) -> workflows.Signature:
        """A signature: this dispatch described, not done, for `chain()` and `group()`.

        Takes `dispatch()`'s options, and `delay` or `when`; checked now, as `dispatch()`
        checks them (TaskNotFound, InvalidTaskPayload, InvalidTaskOptions).
        """
        return workflows.Signature(self, payload, options)


@overload
def task(fn: Callable[..., Any], /) -> Task: ...
@overload
def task(*, name: str | None = None, **options: Any) -> Callable[[Callable[..., Any]], Task]: ...


def task(
    fn: Callable[..., Any] | None = None, /, *, name: str | None = None, **options: Any
) -> Any:
    """Declare a task: bare `@task` or `@task(max_retry=3, queue="emails", ...)`.

    The task is registered under `name` (default `"<module>.<function>"`).

    Raises:
        InvalidTaskOptions: an unknown or bad option.
        UniqueForRequired: `unique=True` without `unique_for`.
        ImproperlyConfigured: another task already has this name.
    """
    known = set(TaskOptions.__dataclass_fields__)
    unknown = sorted(set(options) - known)
    if unknown:
        raise InvalidTaskOptions(
            f"unknown @task option(s) {', '.join(unknown)}; known: name, {', '.join(sorted(known))}"
        )

    def decorate(function: Callable[..., Any]) -> Task:
        task_name = name if name is not None else f"{function.__module__}.{function.__qualname__}"
        declared = Task(fn=function, name=task_name, options=TaskOptions(**options))
        return registry.register(declared)

    if fn is not None:
        return decorate(fn)
    return decorate
