"""Putting tasks on their queue: `dispatch`, `dispatch_many`, `dispatch_on_commit`,
`dispatch_delayed` and `schedule_for`, and the building of every first-attempt message.

Each of them builds and checks its message first (`prepare`, below: the task resolved,
the queue, expiry, priority and task_id checked, the payload checked before a unique key
function walks it, the claim worked out; the due time of a `delay` or a `when` turned
into epoch milliseconds, checked strictly), then hands it on: to eager mode
(`TASKRUNNER["EAGER"]`, for tests: the task runs at once, `eager.py`), to the
transactional outbox (`outbox.py`), or to its queue (`sending.py`, where the round trips
are). Workflows, the outbox, periodic tasks and the Tasks backend build their messages
with the same functions.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from django_taskrunner import tracing
from django_taskrunner.conf import get_settings
from django_taskrunner.core import clock, eager, outbox
from django_taskrunner.core import unique as locks
from django_taskrunner.core.message import TaskMessage, batch_bodies
from django_taskrunner.core.options import (
    DEFAULT_PRIORITY,
    TaskOptions,
    check_fair_key,
    check_priority,
    check_queue_name,
    check_seconds,
    fair_weight_of,
)
from django_taskrunner.core.registry import registry
from django_taskrunner.core.sending import (
    add_batch,
    add_delayed,
    add_now,
    add_plain,
    announce_queue,
    debounce_ms,
    redis_down,
)
from django_taskrunner.core.unique import KeySource, UniqueClaim
from django_taskrunner.exceptions import InvalidTaskOptions, TaskAlreadyDispatched, TaskIdConflict
from django_taskrunner.store import get_store
from django_taskrunner.store.errors import REDIS_DOWN

if TYPE_CHECKING:
    from django_taskrunner.core.task import Task


# Scores are doubles: past 2**53 ms (year ~287,000) they stop being exact integers.
MAX_DUE_MS = 2**53


def delay_seconds(delay: Any) -> float:
    """`delay` (seconds or a timedelta) as a float; refuses other types and NaN/infinity."""
    if isinstance(delay, timedelta):
        return delay.total_seconds()
    if isinstance(delay, bool) or not isinstance(delay, int | float):
        raise TypeError(
            f"delay must be a number of seconds or a datetime.timedelta, "
            f"not {type(delay).__name__}"
        )
    if not math.isfinite(delay):
        raise InvalidTaskOptions(f"delay must be a finite number of seconds, not {delay!r}")
    return float(delay)


def due_from_delay(delay: Any, now_ms: int) -> int:
    """Epoch ms at which a task delayed by `delay` from `now_ms` becomes due."""
    due = now_ms + round(delay_seconds(delay) * 1000)
    return _bounded(due, f"delay {delay!r}")


def due_from_when(when: Any) -> int:
    """Epoch ms of `when`; a naive datetime is read in Django's current time zone.

    Raises:
        TypeError: `when` is not a datetime.
        InvalidTaskOptions: a naive `when` is ambiguous or does not exist in that zone
            (a daylight-saving change), so its instant cannot be known.
    """
    if not isinstance(when, datetime):
        raise TypeError(f"when must be a datetime.datetime, not {type(when).__name__}")
    if timezone.is_naive(when):
        when = make_aware_strict(when, timezone.get_current_timezone())
    return _bounded(math.floor(when.timestamp() * 1000), f"when {when.isoformat()}")


def make_aware_strict(naive: datetime, zone: tzinfo) -> datetime:
    """`naive` as an aware datetime in `zone`; refuse a wall time DST makes unclear."""
    early, late = naive.replace(tzinfo=zone, fold=0), naive.replace(tzinfo=zone, fold=1)
    if early.utcoffset() == late.utcoffset():
        return early
    # A wall time that does not survive a round trip through UTC was skipped (spring
    # forward); one that does, with two offsets, happens twice (fall back).
    back = early.astimezone(UTC).astimezone(zone).replace(tzinfo=None)
    problem = "does not exist" if back != naive else "is ambiguous"
    raise InvalidTaskOptions(
        f"naive datetime {naive.isoformat()} {problem} in time zone {zone} (a daylight-saving "
        f"change); pass an aware datetime instead"
    )


def _bounded(due_ms: int, what: str) -> int:
    if not -MAX_DUE_MS < due_ms < MAX_DUE_MS:
        raise InvalidTaskOptions(f"{what} is too far from now to schedule")
    return due_ms

def resolve_task(name_or_task: str | Task) -> Task:
    """The `Task` for a registered name, or the task itself; else `TaskNotFound`."""
    if isinstance(getattr(name_or_task, "options", None), TaskOptions):  # a Task
        return name_or_task
    if isinstance(name_or_task, str):
        return registry.get(name_or_task)
    raise TypeError(f"expected a task name or a Task, not {type(name_or_task).__name__}")


def resolve_queue(task: Task, queue: str | None) -> str:
    """Call argument > `@task(queue=...)` > `TASKRUNNER["DEFAULT_QUEUE"]`."""
    if queue is not None:
        return check_queue_name(queue)
    if task.options.queue is not None:
        return task.options.queue
    return get_settings().DEFAULT_QUEUE


def _expires_at(task: Task, expires: float | None, start_ms: int) -> int | None:
    seconds = expires if expires is not None else task.options.expires
    if seconds is None:
        return None
    check_seconds("expires", seconds)  # the same rule as @task(expires=...)
    return start_ms + int(seconds * 1000)


def _reservation_timeout_ms(task: Task) -> int | None:
    """The task's own reservation timeout travels with its message, for any reclaiming worker."""
    seconds = task.options.reservation_timeout
    return None if seconds is None else int(seconds * 1000)


# The bits of a random UUID4 that say its version (4) and variant (RFC 4122).
_UUID4_KEEP = ~(0xC000 << 48) & ~(0xF000 << 64)
_UUID4_SET = (0x8000 << 48) | (4 << 76)


def new_message_id() -> str:
    """A random UUID4 as 32 hex digits, the same as `uuid.uuid4().hex` but cheaper."""
    return f"{(int.from_bytes(os.urandom(16), 'big') & _UUID4_KEEP) | _UUID4_SET:032x}"


def new_message_ids(count: int) -> list[str]:
    """`count` new message ids from one read of the system's random source (a batch)."""
    raw = os.urandom(16 * count)
    return [f"{(int.from_bytes(raw[at:at + 16], 'big') & _UUID4_KEEP) | _UUID4_SET:032x}"
            for at in range(0, 16 * count, 16)]


def new_message(
    task: Task, payload: Any, *, queue: str | None = None, expires: float | None = None,
    start_ms: int | None = None, task_id: str | None = None, priority: int | None = None,
    fair_key: str | None = None, id_ran_before: bool = False,
) -> TaskMessage:
    """A first-attempt message for `task`; `start_ms` is when it may first run.

    With `task_id` the message id is that id (checked), else a random one. `priority`
    (checked) overrides the task's; the default one is left out of the message.
    """
    level = check_priority(priority if priority is not None else task.options.priority,
                           task.name)
    now = clock.now_ms()
    message = TaskMessage(
        id=new_message_id() if task_id is None else locks.check_task_id(
            task_id, task.name, ran_before=id_ran_before),
        task_name=task.name,
        queue=resolve_queue(task, queue),
        payload=payload,
        attempt=1,
        dispatched_at_ms=now,
        expires_at_ms=_expires_at(task, expires, start_ms if start_ms is not None else now),
        has_task_id=task_id is not None,
        reservation_timeout_ms=_reservation_timeout_ms(task),
        priority=None if level == DEFAULT_PRIORITY else level,
        fair_key=resolve_fair_key(task, payload, fair_key),
    )
    if message.fair_key is not None:
        weight = fair_weight_of(task.options, message.fair_key, task.name)
        message.fair_weight = None if weight == 1 else weight
    message.trace_context = tracing.producer_context(message)  # None unless traced
    return message


def resolve_fair_key(task: Task, payload: Any, fair_key: str | None) -> str | None:
    """The dispatch's `fair_key` > `@task(fair_key=payload -> str)`'s, checked; the
    callable's own error propagates (the dispatch fails, nothing is queued)."""
    if fair_key is None and task.options.fair_key is not None:
        fair_key = task.options.fair_key(payload)
    return check_fair_key(fair_key, task.name)


def prepare(
    task: Task, payload: Any, *, queue: str | None = None, task_id: str | None = None,
    unique_key: KeySource = None, unique_for: float | None = None,
    unique_mode: str | None = None, expires: float | None = None, start_ms: int | None = None,
    on_conflict: str | None = None, priority: int | None = None, fair_key: str | None = None,
    id_ran_before: bool = False,
) -> tuple[TaskMessage, UniqueClaim | None]:
    """The message and what it must reserve (lock, task_id), all checked, without Redis.

    The delayed path calls this with `start_ms` = the due time, then adds the claim's
    reservation with the delayed set as destination.
    """
    message = new_message(task, payload, queue=queue, expires=expires, start_ms=start_ms,
                          task_id=task_id, priority=priority, fair_key=fair_key,
                          id_ran_before=id_ran_before)
    claim = locks.claim_for(task, message, get_settings().PREFIX, unique_key=unique_key,
                            unique_for=unique_for, unique_mode=unique_mode,
                            on_conflict=on_conflict)
    quiet_ms = debounce_ms(claim)
    if quiet_ms is not None:  # it starts after its quiet period: expiry counts from there
        now = clock.now_ms()
        start = max(now if start_ms is None else start_ms, now + quiet_ms)
        message.expires_at_ms = _expires_at(task, expires, start)
    return message, claim

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
    if transactional and not get_settings().EAGER:
        return outbox.put(message, message.to_json(), claim)
    return _send(task, message, claim)


def dispatch_again(task: Task, payload: Any, *, queue: str, task_id: str) -> TaskMessage:
    """`dispatch(task, payload, queue=queue, task_id=task_id)` of a task id that ran and
    finished: an admin retry of a failed task that kept durable steps, which hold under
    its id. That id may name the stream entry of its plain dispatch
    (`entries.entry_task_id`), which `dispatch()` refuses of a caller's `task_id`: the
    entry's run is over, and no new entry can get that stream id again."""
    message, claim = prepare(task, payload, queue=queue, task_id=task_id, id_ran_before=True)
    return _send(task, message, claim)


def _send(task: Task, message: TaskMessage, claim: UniqueClaim | None) -> TaskMessage:
    """A prepared message on its way: run at once (eager mode), into the delayed set for
    its quiet period (unique_mode="debounce"), or onto its stream."""
    if get_settings().EAGER:
        return eager.run_eagerly(task, message, message.to_json(), claim)
    quiet_ms = debounce_ms(claim)
    if quiet_ms is not None:
        return add_delayed(message, clock.now_ms() + quiet_ms, claim, task=task)
    return add_now(message, claim, task)


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
    return _dispatch_at(task, payload, due_from_delay(delay, clock.now_ms()), options)


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
    return _dispatch_at(task, payload, due_from_when(when), options)


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
