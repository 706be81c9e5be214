"""Putting tasks on their queue: `dispatch`, `dispatch_many`, `dispatch_on_commit`,
`dispatch_delayed` and `schedule_for`.

Each of them builds and checks its message first (`prepare.py`), then hands it on: to
eager mode (`TASKRUNNER["EAGER"]`, for tests: the task runs at once, `eager.py`), to the
transactional outbox (`outbox.py`), or to its queue (`sending.py`, where the round
trips are).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import transaction

from django_taskrunner.conf import get_settings
from django_taskrunner.core import clock, due, eager, outbox
from django_taskrunner.core.message import TaskMessage, batch_bodies
from django_taskrunner.core.prepare import (
    debounce_ms,
    new_message,
    new_message_ids,
    prepare,
    resolve_task,
)
from django_taskrunner.core.sending import (
    add_batch,
    add_delayed,
    add_now,
    add_plain,
    announce_queue,
    redis_down,
)
from django_taskrunner.core.unique import KeySource
from django_taskrunner.exceptions import TaskAlreadyDispatched, TaskIdConflict
from django_taskrunner.store import get_store
from django_taskrunner.store.errors import REDIS_DOWN

if TYPE_CHECKING:
    from django_taskrunner.core.task import Task

__all__ = ["dispatch", "dispatch_delayed", "dispatch_many", "dispatch_on_commit",
           "schedule_for"]

logger = logging.getLogger(__name__)


def dispatch(
    name_or_task: str | Task, payload: Any = None, *, queue: str | None = None,
    task_id: str | None = None, unique_key: KeySource = None, unique_for: float | None = None,
    unique_mode: str | None = None, expires: float | None = None, on_conflict: str | None = None,
    transactional: bool = False, priority: int | None = None, fair_key: str | None = None,
) -> TaskMessage:
    """Queue a task to run as soon as a worker is free.

    Args:
        name_or_task: a registered task name or a `Task`.
        payload: any JSON-serialisable value, passed to the task.
        queue: run on this queue instead of the task's own.
        task_id: the message id; no other task with this id may be queued or running.
        unique_key: a key string or a `payload -> str` callable, instead of the task's.
        unique_for: lock TTL in seconds (1 s .. 7 days), instead of the task's.
        unique_mode: when the lock frees, instead of the task's (see docs/unique.md).
            Any of the three `unique_*` makes this dispatch unique.
        expires: seconds after which the task, if not started, is not run.
        on_conflict: what a held unique lock means, instead of the task's: "raise",
            "return" (the holder's message) or "replace" (a holder not started yet takes
            this payload, keeping its id); see docs/unique.md.
        transactional: write the task to the outbox in the current transaction of the
            default database instead: queued once it commits, never if it rolls back,
            and never lost after the commit, even with Redis down (docs/outbox.md).
        priority: 0..9, instead of the task's: higher is read first (docs/priorities.md).
        fair_key: instead of the task's: served in turns per key (docs/flow-control.md).

    Raises:
        TaskNotFound: no task has that name.
        InvalidTaskPayload: the payload is not JSON-serialisable, holds text that is not
            valid Unicode (a lone surrogate), is nested more than `PAYLOAD_MAX_DEPTH`
            levels, or makes a message over `MESSAGE_MAX_BYTES` (see docs/tasks.md).
        InvalidTaskOptions: a bad option, or the unique key function failed.
        UniqueForRequired: the dispatch is unique but no `unique_for` is known.
        TaskAlreadyDispatched: the unique lock is held (`.holder_id`, `.lock_key`).
        TaskIdConflict: another queued or running task has this `task_id`.
        RedisUnavailable: Redis could not be reached; `.maybe_queued` says whether the
            task may have been queued all the same (retry with a `task_id` to be safe).
    """
    task = resolve_task(name_or_task)
    message, claim = prepare(task, payload, queue=queue, task_id=task_id, unique_key=unique_key,
                             unique_for=unique_for, unique_mode=unique_mode, expires=expires,
                             on_conflict=on_conflict, priority=priority, fair_key=fair_key)
    body = message.to_json()
    if get_settings().EAGER:
        return eager.run_eagerly(task, message, body, claim)
    if transactional:
        return outbox.put(message, body, claim)
    quiet_ms = debounce_ms(claim)
    if quiet_ms is not None:  # unique_mode="debounce": it waits out its quiet period
        return add_delayed(message, clock.now_ms() + quiet_ms, claim, task=task)
    return add_now(message, body, claim, task)


def dispatch_delayed(
    name_or_task: str | Task, payload: Any = None, *, delay: float | timedelta,
    **options: Any,
) -> TaskMessage:
    """Queue a task to start `delay` from now; a delay <= 0 dispatches at once.

    Takes `dispatch()`'s options (`queue`, `task_id`, `unique_*`, `expires`). A unique
    lock is taken now, and its `unique_for` counts from now, not from the due time.

    Args:
        delay: seconds (int or float) or a `timedelta`; there is no minimum.
        expires: seconds after the due time past which the task, not started, is not run.

    Raises:
        TypeError: `delay` is neither a number nor a timedelta.
        InvalidTaskOptions: `delay` is NaN, infinite or absurdly far away.
        TaskNotFound, InvalidTaskPayload, TaskAlreadyDispatched, ...: as for `dispatch`.
    """
    task = resolve_task(name_or_task)
    return _dispatch_at(task, payload, due.due_from_delay(delay, clock.now_ms()), options)


def schedule_for(
    name_or_task: str | Task, payload: Any = None, *, when: datetime, **options: Any,
) -> TaskMessage:
    """Queue a task to start at `when`; a time already past dispatches at once.

    A naive `when` is read in Django's current time zone. Takes `dispatch()`'s options.

    Raises:
        TypeError: `when` is not a datetime.
        InvalidTaskOptions: a naive `when` is ambiguous or skipped by a DST change.
        TaskNotFound, InvalidTaskPayload, TaskAlreadyDispatched, ...: as for `dispatch`.
    """
    task = resolve_task(name_or_task)
    return _dispatch_at(task, payload, due.due_from_when(when), options)


DISPATCH_OPTIONS = frozenset({"queue", "task_id", "unique_key", "unique_for", "unique_mode",
                              "expires", "on_conflict", "priority", "fair_key"})


def _dispatch_at(task: Task, payload: Any, due_ms: int, options: dict[str, Any]) -> TaskMessage:
    unknown = sorted(set(options) - DISPATCH_OPTIONS)
    if unknown:
        raise TypeError(f"unexpected option(s) {', '.join(unknown)} for a delayed dispatch")
    if due_ms <= clock.now_ms() or get_settings().EAGER:  # eager mode ignores delays
        return dispatch(task, payload, **options)
    message, claim = prepare(task, payload, start_ms=due_ms, **options)
    quiet_ms = debounce_ms(claim)
    if quiet_ms is not None:  # never before the quiet period after this dispatch ends
        due_ms = max(due_ms, clock.now_ms() + quiet_ms)
    return add_delayed(message, due_ms, claim, task=task)


# The options that make a dispatch_many call unique (as the task's own options do).
UNIQUE_OPTIONS = ("unique_key", "unique_for", "unique_mode", "on_conflict")


def dispatch_many(
    name_or_task: str | Task, payloads: Iterable[Any], *, queue: str | None = None,
    unique_key: KeySource = None, unique_for: float | None = None,
    unique_mode: str | None = None, expires: float | None = None, on_conflict: str | None = None,
    priority: int | None = None, fair_key: str | None = None,
) -> list[TaskMessage]:
    """Queue one task per payload in one round trip; nothing is queued if one is bad
    (`InvalidTaskPayload`, as for `dispatch`).

    For a unique task (or with a `unique_*` override) each payload takes its lock in the
    same round trip; a payload whose lock is held (by an earlier task, or by an earlier
    payload of this batch) is skipped and logged under on_conflict "raise"; under
    "return" its place in the list is the holder's message, under "replace" the holder
    (when not started) takes the payload and its message is listed. Returns the
    messages, in order.
    """
    task = resolve_task(name_or_task)
    payloads = list(payloads)
    if not payloads:
        return []
    options = {"queue": queue, "unique_key": unique_key, "unique_for": unique_for,
               "unique_mode": unique_mode, "expires": expires, "on_conflict": on_conflict,
               "priority": priority, "fair_key": fair_key}
    eager_mode = get_settings().EAGER
    if not eager_mode and not (task.options.unique or task.options.unique_mode == "debounce"
                               or any(options[name] is not None for name in UNIQUE_OPTIONS)):
        if fair_key is None and task.options.fair_key is None:
            return _dispatch_many_plain(task, payloads, queue, expires, priority)
    prepared = [prepare(task, payload, **options) for payload in payloads]
    if eager_mode:
        return eager.run_many(task, [(message, message.to_json(), claim)
                                     for message, claim in prepared])
    return add_batch(task, prepared)


def _dispatch_many_plain(
    task: Task, payloads: list[Any], queue: str | None, expires: float | None,
    priority: int | None = None,
) -> list[TaskMessage]:
    """The common case, no locks: queue, expiry and dispatch time are worked out once,
    since the batch shares them, and the bodies go in one pipelined round trip."""
    first = new_message(task, None, queue=queue, expires=expires, priority=priority)
    messages = [TaskMessage(id=message_id, task_name=first.task_name, queue=first.queue,
                            payload=payload, dispatched_at_ms=first.dispatched_at_ms,
                            expires_at_ms=first.expires_at_ms,
                            reservation_timeout_ms=first.reservation_timeout_ms,
                            trace_context=first.trace_context,  # one span for the batch
                            priority=first.priority)
                for message_id, payload in zip(new_message_ids(len(payloads)), payloads,
                                               strict=True)]
    bodies = batch_bodies(messages)
    try:
        stream_ids = add_plain(get_store().streams, task, messages, bodies)
    except REDIS_DOWN as exc:
        raise redis_down(task, exc) from exc
    for message, stream_id in zip(messages, stream_ids, strict=True):
        message.stream_id = stream_id or None
    announce_queue(get_store().streams, first.queue)
    return messages


def dispatch_on_commit(
    name_or_task: str | Task, payload: Any = None, *, using: str | None = None, **options: Any
) -> TaskMessage | None:
    """Queue the task once the current transaction commits (at once outside one).

    The task, payload and options are checked now, so a mistake raises here, not at
    commit. With `TASKRUNNER["OUTBOX"]` (the default) the task is written to the outbox
    of `using` in the same transaction and its message is returned: a commit guarantees
    it is queued, even if Redis is down then (docs/outbox.md). Without it, the task is
    dispatched by an on-commit callback and None is returned; a Redis outage then raises
    from the commit, and the task is lost.

    A duplicate found at commit (the unique lock or task_id is taken) is logged and
    skipped (with the outbox, also written as a FailedTask row): raising there would stop
    Django's other on-commit callbacks.
    """
    task = resolve_task(name_or_task)
    message, claim = prepare(task, payload, **options)
    body = message.to_json()
    if outbox.enabled():
        return outbox.put(message, body, claim, using)

    def send() -> None:
        try:
            dispatch(task, payload, **options)
        except (TaskAlreadyDispatched, TaskIdConflict) as exc:
            logger.info("dispatch on commit skipped a duplicate: %s", exc)

    transaction.on_commit(send, using=using)
    return None
