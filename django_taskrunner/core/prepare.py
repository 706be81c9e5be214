"""A dispatch's message built and checked, and what it must reserve, without Redis.

Every dispatch path (`dispatch`, the delayed ones, `dispatch_many`, workflows, the
outbox, periodic tasks, the Tasks backend) builds its first-attempt message here: the
task resolved, the queue, expiry, priority and task_id checked, the payload checked
before a unique key function walks it, and the claim (lock, task_id) worked out.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from django_taskrunner import tracing
from django_taskrunner.conf import get_settings
from django_taskrunner.core import clock
from django_taskrunner.core import unique as locks
from django_taskrunner.core.message import TaskMessage
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
from django_taskrunner.core.unique import KeySource, UniqueClaim
from django_taskrunner.store import keys

if TYPE_CHECKING:
    from django_taskrunner.core.task import Task


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
    fair_key: str | None = None,
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
) -> tuple[TaskMessage, UniqueClaim | None]:
    """The message and what it must reserve (lock, task_id), all checked, without Redis.

    The delayed path calls this with `start_ms` = the due time, then adds the claim's
    reservation with the delayed set as destination.
    """
    message = new_message(task, payload, queue=queue, expires=expires, start_ms=start_ms,
                          task_id=task_id, priority=priority, fair_key=fair_key)
    claim = locks.claim_for(task, message, get_settings().PREFIX, unique_key=unique_key,
                            unique_for=unique_for, unique_mode=unique_mode,
                            on_conflict=on_conflict)
    quiet_ms = debounce_ms(claim)
    if quiet_ms is not None:  # it starts after its quiet period: expiry counts from there
        now = clock.now_ms()
        start = max(now if start_ms is None else start_ms, now + quiet_ms)
        message.expires_at_ms = _expires_at(task, expires, start)
    return message, claim


def claim_level(claim: UniqueClaim, message: TaskMessage) -> str:
    """The stream a claimed message goes to: its shard's, or its priority level's there."""
    return keys.level_name(claim.shard, message.priority)


def debounce_ms(claim: UniqueClaim | None) -> int | None:
    """The quiet period of a debounced dispatch, else None."""
    return None if claim is None or claim.lock is None else claim.lock.debounce_ms
