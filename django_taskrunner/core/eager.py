"""Eager mode (`TASKRUNNER["EAGER"] = True`, for tests): a dispatch runs its task here
and now, in the calling process, instead of queuing it.

The dispatch checks everything a real one checks (task, options, payload limits), and
the task gets its payload back from the message's JSON, as a worker would: a payload a
real dispatch refuses fails the same way here, and a task never sees a tuple or a
`datetime` a worker would not. Delays are ignored; `dispatch_on_commit` (and
`dispatch_on`) still wait for the commit, through Django's `on_commit`.

No Redis is needed. Unique locks and task ids are kept in this process, in a registry of
held keys with their TTLs, taken before the run and freed at the points their mode names
(`core.unique.RELEASE_ON`), so a duplicate raises `TaskAlreadyDispatched` or
`TaskIdConflict` exactly where a real dispatch would. The registry is cleared when the
settings change (`override_settings`) and by `clear_locks()`.

Each run leaves its record in this process too (`EagerRecords`: status, result or error,
times), so `lookup(id)` and `wait(id)` answer for an eagerly run task without Redis.

A failed attempt is retried at once, up to `max_retry` (no backoff); what the last
attempt raised propagates to the caller, and no `FailedTask` row is written. An
`async def` task runs to completion on an event loop of its own. Time limits, expiry
and statistics are worker matters and do not apply.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from django_taskrunner.conf import get_settings, on_reset
from django_taskrunner.core import clock
from django_taskrunner.core import unique as locks
from django_taskrunner.core.awaitables import returned_awaitable, run_to_end
from django_taskrunner.core.context import TaskContext, eager_steps, forget_eager
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.exceptions import TaskAlreadyDispatched, TaskIdConflict

if TYPE_CHECKING:
    from django_taskrunner.core.task import Task
    from django_taskrunner.core.unique import UniqueClaim

logger = logging.getLogger(__name__)


class HeldKeys:
    """The unique locks and task ids eager runs hold in this process: key -> (holder id,
    expiry on the monotonic clock, or None for a task id)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, tuple[str, float | None]] = {}

    def take(self, claim: UniqueClaim) -> None:
        """Take the claim's lock and task id, or raise as the enqueue script would."""
        now = clock.monotonic()
        with self._lock:
            if claim.id_key is not None and self._holder(claim.id_key, now) is not None:
                raise TaskIdConflict(claim.task_name, claim.holder_id, claim.id_key)
            lock = claim.lock
            if lock is not None:
                holder = self._holder(lock.key, now)
                if holder is not None:
                    raise TaskAlreadyDispatched(claim.task_name, holder, lock.key)
                self._held[lock.key] = (claim.holder_id, now + lock.ttl_ms / 1000)
            if claim.id_key is not None:
                self._held[claim.id_key] = (claim.holder_id, None)

    def free(self, claim: UniqueClaim, message: TaskMessage, event: str) -> None:
        """Free what the message frees at `event` (per its mode), if it still holds it."""
        lock = claim.lock
        with self._lock:
            if lock is not None and event in locks.RELEASE_ON.get(lock.mode, frozenset()):
                self._free(lock.key, message.id)
            if claim.id_key is not None and event in locks.TASK_ID_FREED_ON:
                self._free(claim.id_key, message.id)

    def clear(self) -> None:
        with self._lock:
            self._held.clear()

    def _holder(self, key: str, now: float) -> str | None:
        held = self._held.get(key)
        if held is None:
            return None
        holder, expires = held
        if expires is not None and now >= expires:
            del self._held[key]
            return None
        return holder

    def _free(self, key: str, holder: str) -> None:
        if self._held.get(key, ("", None))[0] == holder:
            del self._held[key]


held_keys = HeldKeys()
on_reset(held_keys.clear)


class EagerRecords:
    """The records of the tasks run eagerly in this process, as record fields (those of
    `store/records.py`) by task id; the oldest are dropped past `MAX_RECORDS`."""

    MAX_RECORDS = 10_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fields: OrderedDict[str, dict[str, str]] = OrderedDict()

    def write(self, task: Task, message: TaskMessage, started_ms: int, outcome: dict[str, str],
              ) -> None:
        """Keep the record of one eager run (none for a task whose `result_ttl` is 0)."""
        own = task.options.result_ttl
        if int(get_settings().RESULT_TTL if own is None else own) <= 0:
            return
        fields = {"t": message.task_name, "q": message.queue, "a": str(message.attempt),
                  "d": str(started_ms), "st": str(started_ms), "f": str(clock.now_ms()),
                  **outcome}
        with self._lock:
            self._fields[message.id] = fields
            self._fields.move_to_end(message.id)
            while len(self._fields) > self.MAX_RECORDS:
                self._fields.popitem(last=False)

    def get(self, task_id: str) -> dict[str, str] | None:
        with self._lock:
            found = self._fields.get(task_id)
            return None if found is None else dict(found)

    def clear(self) -> None:
        with self._lock:
            self._fields.clear()


eager_records = EagerRecords()
on_reset(eager_records.clear)


def succeeded_fields(result: Any) -> dict[str, str]:
    """The outcome fields of a run that returned `result` (kept when it is JSON)."""
    try:
        return {"s": "succeeded", "r": json.dumps(result, allow_nan=False)}
    except (TypeError, ValueError, RecursionError):
        return {"s": "succeeded", "e": "the result was not kept: it cannot be encoded as JSON"}


def failed_fields(exc: BaseException) -> dict[str, str]:
    """The outcome fields of a run whose last attempt raised `exc`."""
    return {"s": "failed", "e": f"{type(exc).__name__}: {exc}"}


def clear_locks() -> None:
    """Forget every unique lock and task id eager runs hold (between tests)."""
    held_keys.clear()


def run_eagerly(
    task: Task, message: TaskMessage, body: str, claim: UniqueClaim | None
) -> TaskMessage:
    """Run a dispatched task now: `message` as checked and encoded (`body`) by dispatch.

    Returns the message (its `attempt` the last one run); raises what the last attempt
    raised, or `TaskAlreadyDispatched` / `TaskIdConflict` like a real dispatch.
    """
    if claim is not None:
        try:
            held_keys.take(claim)
        except TaskAlreadyDispatched as exc:
            # The holder has run already (eager runs at once): "replace" acts as "raise".
            if claim.policy != "return" or claim.lock is None:
                raise
            return locks.holder_message(exc.holder_id, None, message, claim.lock)
    # What a worker would read back: the payload after its JSON round trip.
    received = TaskMessage.from_json(body)
    started_ms = clock.now_ms()
    try:
        _free(claim, received, locks.STARTED)
        attempt, result = _run_attempts(task, received)
    except BaseException as exc:
        _free(claim, received, locks.FAILED)
        eager_records.write(task, replace(received, attempt=task.options.max_retry + 1),
                            started_ms, failed_fields(exc))
        raise
    _free(claim, received, locks.SUCCEEDED)
    message.attempt = attempt
    eager_records.write(task, message, started_ms, succeeded_fields(result))
    return message


def run_many(
    task: Task, prepared: list[tuple[TaskMessage, str, UniqueClaim | None]]
) -> list[TaskMessage]:
    """`dispatch_many`: every payload was checked before this; each runs in turn, and a
    duplicate (its lock held, maybe by an earlier payload) is skipped and logged."""
    done = []
    for message, body, claim in prepared:
        try:
            done.append(run_eagerly(task, message, body, claim))
        except TaskAlreadyDispatched as exc:
            logger.info("dispatch_many: skipped a duplicate of task=%s: lock %s is held by %s",
                        exc.task_name, exc.lock_key, exc.holder_id)
    return done


def _free(claim: UniqueClaim | None, message: TaskMessage, event: str) -> None:
    if claim is not None:
        held_keys.free(claim, message, event)


def _run_attempts(task: Task, message: TaskMessage) -> tuple[int, Any]:
    """Run attempt after attempt until one succeeds (its number and result) or the last
    one raises; the steps kept in process for the call are dropped after it."""
    try:
        return _attempts(task, message)
    finally:
        forget_eager(message.id)


def _attempts(task: Task, message: TaskMessage) -> tuple[int, Any]:
    while True:
        try:
            result = call(task, message)
            return message.attempt, result
        except Exception as exc:
            if message.attempt > task.options.max_retry:
                raise
            logger.info("eager: task=%s id=%s attempt=%d raised %s: %s; retrying at once",
                        task.name, message.id, message.attempt, type(exc).__name__, exc)
            message = replace(message, attempt=message.attempt + 1)


def call(task: Task, message: TaskMessage) -> Any:
    """One attempt: the function with its payload (and context), awaited if async."""
    if task.options.takes_context:
        result = task.fn(context(message), message.payload)
    else:
        result = task.fn(message.payload)
    if task.is_async:
        return run_to_end(result)
    error = returned_awaitable(task.name, result)
    if error is not None:
        raise error
    return result


def context(message: TaskMessage) -> TaskContext:
    """The context of an eager attempt: nothing to keep alive, never cancelled."""
    return TaskContext(id=message.id, task_name=message.task_name, queue=message.queue,
                       attempt=message.attempt,
                       _steps=eager_steps(message.id, message.task_name))
