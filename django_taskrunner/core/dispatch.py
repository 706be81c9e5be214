"""Putting tasks on their queue: `dispatch`, `dispatch_many`, `dispatch_on_commit`,
`dispatch_delayed` and `schedule_for`.

In eager mode (`TASKRUNNER["EAGER"]`, for tests) each of them runs the task at once
instead, after the same checks (`eager.py`).

A plain dispatch is one XADD: one round trip, nothing else on the hot path. A unique
or `task_id` dispatch is one EVALSHA that takes the lock and adds the message together
(see `unique.py`, and `store/locks.py` for the commands). A delayed one is one script
too: ZADD, and a PUBLISH that wakes the scheduler when it is due before every waiting
entry.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import transaction

from django_taskrunner import tracing
from django_taskrunner.conf import get_settings, on_reset
from django_taskrunner.core import clock, due, eager, outbox
from django_taskrunner.core import unique as locks
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.core.options import (
    DEFAULT_PRIORITY,
    TaskOptions,
    check_priority,
    check_queue_name,
    check_seconds,
)
from django_taskrunner.core.records import dispatch_record
from django_taskrunner.core.registry import registry
from django_taskrunner.core.unique import Claim, KeySource
from django_taskrunner.exceptions import (
    RedisUnavailable,
    TaskAlreadyDispatched,
    TaskIdConflict,
)
from django_taskrunner.store import keys, sharding
from django_taskrunner.store.broker import Broker, get_broker
from django_taskrunner.store.connection import built_client
from django_taskrunner.store.errors import REDIS_DOWN, unavailable
from django_taskrunner.store.locks import get_locks
from django_taskrunner.store.schedule import for_broker as schedule_store

if TYPE_CHECKING:
    from django_taskrunner.core.task import Task
from django_taskrunner.core.message import check_payload

logger = logging.getLogger(__name__)


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


def new_message_id() -> str:
    """A random UUID4 as 32 hex digits, the same as `uuid.uuid4().hex` but cheaper."""
    bits = int.from_bytes(os.urandom(16), "big")
    bits = (bits & ~(0xC000 << 48)) | (0x8000 << 48)  # RFC 4122 variant
    bits = (bits & ~(0xF000 << 64)) | (4 << 76)  # version 4
    return f"{bits:032x}"


def new_message(
    task: Task, payload: Any, *, queue: str | None = None, expires: float | None = None,
    start_ms: int | None = None, task_id: str | None = None, priority: int | None = None,
) -> TaskMessage:
    """A first-attempt message for `task`; `start_ms` is when it may first run.

    With `task_id` the message id is that id (checked), else a random one. `priority`
    (checked) overrides the task's; the default one is left out of the message.
    """
    level = check_priority(priority if priority is not None else task.options.priority,
                           task.name)
    now = clock.now_ms()
    message = TaskMessage(
        id=new_message_id() if task_id is None else locks.check_task_id(task_id, task.name),
        task_name=task.name,
        queue=resolve_queue(task, queue),
        payload=payload,
        attempt=1,
        dispatched_at_ms=now,
        expires_at_ms=_expires_at(task, expires, start_ms if start_ms is not None else now),
        has_task_id=task_id is not None,
        reservation_timeout_ms=_reservation_timeout_ms(task),
        priority=None if level == DEFAULT_PRIORITY else level,
    )
    message.trace_context = tracing.producer_context(message)  # None unless traced
    return message


def prepare(
    task: Task, payload: Any, *, queue: str | None = None, task_id: str | None = None,
    unique_key: KeySource = None, unique_for: float | None = None,
    unique_mode: str | None = None, expires: float | None = None, start_ms: int | None = None,
    on_conflict: str | None = None, priority: int | None = None,
) -> tuple[TaskMessage, Claim | None]:
    """The message and what it must reserve (lock, task_id), all checked, without Redis.

    The delayed path calls this with `start_ms` = the due time, then adds the claim's
    reservation with the delayed set as destination.
    """
    message = new_message(task, payload, queue=queue, expires=expires, start_ms=start_ms,
                          task_id=task_id, priority=priority)
    check_payload(payload, task.name)  # before a unique_key function walks the payload
    claim = locks.claim_for(task, message, get_settings().PREFIX, unique_key=unique_key,
                            unique_for=unique_for, unique_mode=unique_mode,
                            on_conflict=on_conflict)
    quiet_ms = _debounce_ms(claim)
    if quiet_ms is not None:  # it starts after its quiet period: expiry counts from there
        now = clock.now_ms()
        start = max(now if start_ms is None else start_ms, now + quiet_ms)
        message.expires_at_ms = _expires_at(task, expires, start)
    return message, claim


# (prefix, queue) this process has announced in the known queues, and when (monotonic s).
_announced: dict[tuple[str, str], float] = {}
# A queue is announced again after this long, so the leader sees it is still in use.
ANNOUNCE_EVERY_S = 3600.0


@on_reset
def _forget_announced() -> None:
    _announced.clear()


def announce_queue(broker: Broker, queue: str) -> None:
    """Add `queue` to the known queues (`keys.queues_seen_key`, `queues_used_key`), so
    the dashboard, `runtasks`' default queues and the leader's promotions know a queue
    used only through `dispatch(queue=...)`: one round trip on the first dispatch, and
    again an hour later (so the leader does not forget it), none in between."""
    last = _announced.get((broker.prefix, queue))
    now = clock.monotonic()
    if last is not None and now - last < ANNOUNCE_EVERY_S:
        return
    try:
        schedule_store(broker).add_known_queues([queue], clock.now_ms(), used=True)
    except REDIS_DOWN:
        return  # the next dispatch tries again
    _announced[(broker.prefix, queue)] = now


def _redis_down(task: Task, exc: Exception) -> RedisUnavailable:
    return unavailable(f"cannot dispatch {task.name!r}", exc, built_client())


def dispatch(
    name_or_task: str | Task, payload: Any = None, *, queue: str | None = None,
    task_id: str | None = None, unique_key: KeySource = None, unique_for: float | None = None,
    unique_mode: str | None = None, expires: float | None = None, on_conflict: str | None = None,
    transactional: bool = False, priority: int | None = None,
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
        priority: 0..9, instead of the task's: within its queue, a higher one is read
            first (docs/priorities.md).

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
                             on_conflict=on_conflict, priority=priority)
    body = message.to_json()
    if get_settings().EAGER:
        return eager.run(task, message, body, claim)
    if transactional:
        return outbox.put(message, body, claim)
    quiet_ms = _debounce_ms(claim)
    if quiet_ms is not None:  # unique_mode="debounce": it waits out its quiet period
        return add_delayed(message, clock.now_ms() + quiet_ms, claim, task=task)
    try:
        broker = get_broker()
        if claim is None:
            shard = keys.level_name(sharding.next_shard(message.queue), message.priority)
            message.stream_id = broker.add(shard, body, dispatch_record(message, task, shard))
        else:
            reply = get_locks().add_reserved(
                locks.reservation_for(claim, broker, message, body),
                dispatch_record(message, task, level_of(claim, message), claim=claim))
            message = claim.settle(reply, message)
    except REDIS_DOWN as exc:
        raise _redis_down(task, exc) from exc
    announce_queue(broker, message.queue)
    return message


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
                              "expires", "on_conflict", "priority"})


def _dispatch_at(task: Task, payload: Any, due_ms: int, options: dict[str, Any]) -> TaskMessage:
    unknown = sorted(set(options) - DISPATCH_OPTIONS)
    if unknown:
        raise TypeError(f"unexpected option(s) {', '.join(unknown)} for a delayed dispatch")
    if due_ms <= clock.now_ms() or get_settings().EAGER:  # eager mode ignores delays
        return dispatch(task, payload, **options)
    message, claim = prepare(task, payload, start_ms=due_ms, **options)
    quiet_ms = _debounce_ms(claim)
    if quiet_ms is not None:  # never before the quiet period after this dispatch ends
        due_ms = max(due_ms, clock.now_ms() + quiet_ms)
    return add_delayed(message, due_ms, claim, task=task)


def level_of(claim: Claim, message: TaskMessage) -> str:
    """The stream a claimed message goes to: its shard's, or its priority level's there."""
    return keys.level_name(claim.shard, message.priority)


def _debounce_ms(claim: Claim | None) -> int | None:
    """The quiet period of a debounced dispatch, else None."""
    return None if claim is None or claim.lock is None else claim.lock.debounce_ms


def add_delayed(
    message: TaskMessage, due_ms: int, claim: Claim | None = None, task: Task | None = None,
) -> TaskMessage:
    """Put `message` in its queue's delayed set until `due_ms` (the one delayed add path),
    taking its unique lock / task_id in the same script when it has a `claim`; with its
    `task`, the task's record ("delayed") goes in the same round trip. Returns the
    message the dispatch gives back (the holder's, under on_conflict "return")."""
    body = message.to_json()
    try:
        broker = get_broker()
        if claim is None:
            shard = keys.level_name(sharding.next_shard(message.queue), message.priority)
            record = None if task is None else dispatch_record(message, task, shard, due_ms)
            broker.add_delayed(shard, body, due_ms, record)
        else:
            reservation = locks.reservation_for(claim, broker, message, body, due_ms)
            record = None if task is None else dispatch_record(
                message, task, level_of(claim, message), due_ms, claim)
            message = claim.settle(get_locks().add_reserved(reservation, record), message)
    except REDIS_DOWN as exc:
        raise unavailable(f"cannot dispatch {message.task_name!r}", exc,
                          built_client()) from exc
    announce_queue(broker, message.queue)
    return message


def dispatch_many(
    name_or_task: str | Task, payloads: Iterable[Any], *, queue: str | None = None,
    unique_key: KeySource = None, unique_for: float | None = None,
    unique_mode: str | None = None, expires: float | None = None, on_conflict: str | None = None,
    priority: int | None = None,
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
    if get_settings().EAGER:
        prepared = [prepare(task, payload, queue=queue, unique_key=unique_key,
                            unique_for=unique_for, unique_mode=unique_mode, expires=expires,
                            on_conflict=on_conflict, priority=priority)
                    for payload in payloads]
        return eager.run_many(task, [(message, message.to_json(), claim)
                                     for message, claim in prepared])
    if not (task.options.unique or unique_key is not None or unique_for is not None
            or unique_mode is not None or on_conflict is not None
            or task.options.unique_mode == "debounce"):
        return _dispatch_many_plain(task, payloads, queue, expires, priority)
    prepared = [prepare(task, payload, queue=queue, unique_key=unique_key,
                        unique_for=unique_for, unique_mode=unique_mode, expires=expires,
                        on_conflict=on_conflict, priority=priority)
                for payload in payloads]
    bodies = [message.to_json() for message, _claim in prepared]
    # One task with one set of options: either every payload claims a lock or none does.
    claimed = [(message, claim, body)
               for (message, claim), body in zip(prepared, bodies, strict=True) if claim]
    try:
        broker = get_broker()
        if claimed:
            return _add_claimed(broker, task, claimed)
        stream_ids = _add_plain(broker, task, [message for message, _ in prepared], bodies)
    except REDIS_DOWN as exc:
        raise _redis_down(task, exc) from exc
    for (message, _claim), stream_id in zip(prepared, stream_ids, strict=True):
        message.stream_id = stream_id
    return [message for message, _claim in prepared]


def _dispatch_many_plain(
    task: Task, payloads: list[Any], queue: str | None, expires: float | None,
    priority: int | None = None,
) -> list[TaskMessage]:
    """The common case, no locks: queue, expiry and dispatch time are worked out once,
    since the batch shares them, and the bodies go in one pipelined round trip."""
    first = new_message(task, None, queue=queue, expires=expires, priority=priority)
    messages = [TaskMessage(id=new_message_id(), task_name=first.task_name, queue=first.queue,
                            payload=payload, dispatched_at_ms=first.dispatched_at_ms,
                            expires_at_ms=first.expires_at_ms,
                            reservation_timeout_ms=first.reservation_timeout_ms,
                            trace_context=first.trace_context,  # one span for the batch
                            priority=first.priority)
                for payload in payloads]
    bodies = [message.to_json() for message in messages]
    try:
        stream_ids = _add_plain(get_broker(), task, messages, bodies)
    except REDIS_DOWN as exc:
        raise _redis_down(task, exc) from exc
    for message, stream_id in zip(messages, stream_ids, strict=True):
        message.stream_id = stream_id
    announce_queue(get_broker(), first.queue)
    return messages


def _add_plain(
    broker: Broker, task: Task, messages: list[TaskMessage], bodies: list[str]
) -> list[str]:
    """XADD every body (and its record) in one round trip; a queue split into shards
    gets them round robin."""
    queue, priority = messages[0].queue, messages[0].priority
    shards = sharding.spread(queue, len(bodies))
    if priority is not None:
        shards = [keys.level_name(shard, priority) for shard in shards]
    records = [record for message, shard in zip(messages, shards, strict=True)
               if (record := dispatch_record(message, task, shard)) is not None]
    if sharding.shard_count(queue) == 1:
        return broker.add_many(shards[0], bodies, records)
    return broker.add_each(list(zip(shards, bodies, strict=True)), records)


def _add_claimed(
    broker: Broker, task: Task, claimed: list[tuple[TaskMessage, Claim, str]]
) -> list[TaskMessage]:
    """One enqueue script per message, pipelined; the messages whose claim was free."""
    now = clock.now_ms()
    due = [None if (quiet_ms := _debounce_ms(claim)) is None else now + quiet_ms
           for _message, claim, _body in claimed]
    replies = get_locks().add_reserved_many(
        [locks.reservation_for(claim, broker, message, body, due_ms)
         for (message, claim, body), due_ms in zip(claimed, due, strict=True)],
        [dispatch_record(message, task, level_of(claim, message), due_ms, claim=claim)
         for (message, claim, _body), due_ms in zip(claimed, due, strict=True)])
    queued = []
    for (message, claim, _body), reply in zip(claimed, replies, strict=True):
        try:
            message = claim.settle(reply, message)
        except TaskAlreadyDispatched as exc:
            logger.info("dispatch_many: skipped a duplicate of task=%s: lock %s is held by %s",
                        exc.task_name, exc.lock_key, exc.holder_id)
            continue
        queued.append(message)
    return queued


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
