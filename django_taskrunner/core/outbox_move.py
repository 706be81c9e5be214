"""The outbox's move: rows' messages queued in one pipelined round trip, exactly once.

Every row goes through `enqueue.lua` with a reservation whose value is the message's
holder. A message with a `task_id` reserves that id as usual; any other takes the row's
mark instead (`keys.outbox_mark_key`, TTL `MARK_TTL_MS`) in the script's task-id slot.
A move that crashed after Redis took the message but before the row was deleted meets
its own holder on the next run, and adds nothing. The marks of rows gone are deleted
(`clear_marks`, or, after the fast path, in the round trip of the next move: `spend`).
Writing and deleting the rows is `core/outbox.py`'s; this module touches no table.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from django_taskrunner.conf import on_reset
from django_taskrunner.core.clock import now_ms
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.core.outbox_rows import Row
from django_taskrunner.core.records import dispatch_record
from django_taskrunner.core.registry import registry
from django_taskrunner.core.unique import (
    TASK_ID_TTL_MS,
    Claim,
    LockSpec,
    holder_id,
    holder_value,
    reservation_for,
)
from django_taskrunner.exceptions import (
    InvalidTaskPayload,
    TaskAlreadyDispatched,
    TaskIdConflict,
    TaskNotFound,
)
from django_taskrunner.store import keys, sharding
from django_taskrunner.store.broker import get_broker
from django_taskrunner.store.connection import get_redis
from django_taskrunner.store.errors import REDIS_DOWN
from django_taskrunner.store.locks import Reservation, get_locks
from django_taskrunner.store.outbox import OutboxMarks
from django_taskrunner.store.records import RecordWrite
from django_taskrunner.store.values import text

# How long a moved row's mark outlives it in Redis if its DEL is lost (a crash between
# the row's DELETE and the mark's). A row is normally deleted milliseconds after its
# move; the mark only has to outlast a database outage that keeps the row in place.
MARK_TTL_MS = 24 * 3600 * 1000

SENT = "sent"  # queued by this move
ALREADY = "already"  # queued by an earlier move of the same row
FAILED = "failed"  # never queued: a conflict, an unknown task, an undecodable body


@dataclass
class Outcome:
    """What moving one row did; `error` says why a FAILED row was not queued."""

    row: Row
    status: str
    message: TaskMessage | None = None
    error: Exception | None = None
    mark: str | None = None  # the mark to delete once the row is gone


def declared_policy(message: TaskMessage) -> str:
    """What a held lock means for this message's task: its declared on_conflict, or
    "debounce" for that mode (as `core/unique.py` decides it for a dispatch)."""
    options = registry.get(message.task_name).options
    if (message.unique_mode or options.unique_mode) == "debounce":
        return "debounce"
    return options.on_conflict


def _claim(message: TaskMessage, row: Row, prefix: str) -> Claim | None:
    """The claim the dispatch worked out, rebuilt from the message and its row (and the
    task's declared conflict policy)."""
    if not message.lock_key and not message.has_task_id:
        return None
    shard = row.shard or message.queue
    lock = mode_key = None
    if message.lock_key:
        lock = LockSpec(message.lock_key, row.lock_ttl_ms,
                        message.unique_mode or "until_finished", shard,
                        declared_policy(message))
        mode_key = keys.unique_mode_key(prefix, shard, message.lock_key)
    id_key = keys.task_id_key(prefix, shard, message.id) if message.has_task_id else None
    return Claim(message.task_name, message.id, lock, id_key, mode_key=mode_key, shard=shard,
                 holder=holder_value(message))


def _plan(row: Row, broker: Any) -> tuple[Outcome, Reservation, RecordWrite | None]:
    """What one row adds: (its outcome so far, the reservation, the task record).

    A unique row meets a held lock as a direct dispatch would under the task's policy
    (a debounced one waits out its quiet period from now). Raises InvalidTaskPayload /
    TaskNotFound for a row that cannot be queued."""
    prefix = broker.prefix
    message = TaskMessage.from_json(row.body)
    task = registry.get(message.task_name)
    claim = _claim(message, row, prefix)
    shard = keys.level_name(  # its priority's stream there, if it has one
        claim.shard if claim is not None else sharding.next_shard(message.queue),
        message.priority)
    outcome = Outcome(row, SENT, message)
    if claim is not None and claim.id_key is not None:
        id_key, id_ttl_ms = claim.id_key, TASK_ID_TTL_MS
    else:
        id_key = outcome.mark = keys.outbox_mark_key(prefix, shard, message.id)
        id_ttl_ms = MARK_TTL_MS
    if claim is None:
        reservation = Reservation(destination=broker.stream(shard), body=row.body,
                                  holder=holder_value(message), id_key=id_key,
                                  id_ttl_ms=id_ttl_ms)
    else:
        quiet_ms = None if claim.lock is None else claim.lock.debounce_ms
        due_ms = None if quiet_ms is None else now_ms() + quiet_ms
        reservation = replace(reservation_for(claim, broker, message, row.body, due_ms),
                              id_key=id_key, id_ttl_ms=id_ttl_ms)
    return outcome, reservation, dispatch_record(message, task, shard, claim=claim)


def move(rows: Sequence[Row]) -> list[Outcome]:
    """Queue each row's message (one pipelined round trip for all); an outcome per row.

    Redis outage errors pass through: then nothing is known of what was queued, and the
    rows stay for the next move, whose marks tell.
    """
    broker = get_broker()
    outcomes: list[Outcome] = []
    planned: list[tuple[Outcome, Reservation, RecordWrite | None]] = []
    for row in rows:
        try:
            planned.append(_plan(row, broker))
        except (InvalidTaskPayload, TaskNotFound) as exc:
            outcomes.append(Outcome(row, FAILED, None, exc))
    if planned:
        spent = _take_spent()
        try:
            replies = get_locks().add_reserved_many([plan[1] for plan in planned],
                                                    [plan[2] for plan in planned], spent)
        except REDIS_DOWN:
            with _spent_lock:
                _spent.extend(spent)
            raise
        for (outcome, reservation, _record), reply in zip(planned, replies, strict=True):
            _read(outcome, reservation, reply)
            outcomes.append(outcome)
    return outcomes


def _read(outcome: Outcome, reservation: Reservation, reply: tuple[str, str]) -> None:
    """Fill `outcome` from enqueue.lua's reply: our own holder found is an earlier move."""
    status, value = text(reply[0]), text(reply[1])
    message = outcome.message
    assert message is not None
    if status == "ok":
        message.stream_id = None if value == "delayed" else value
    elif value == reservation.holder:
        outcome.status = ALREADY
    elif status == "replaced":  # on_conflict "replace" / debounce: the holder took it
        outcome.status = ALREADY
    elif status == "lock" and reservation.policy == "return":  # the holder stands for it
        outcome.status = ALREADY
    elif status == "id":
        outcome.status = FAILED
        outcome.error = TaskIdConflict(message.task_name, message.id, reservation.id_key)
    else:
        outcome.status = FAILED
        outcome.error = TaskAlreadyDispatched(message.task_name, holder_id(value),
                                              reservation.lock_key)


# Marks of rows the fast path deleted, DELeted in the round trip of the process's next
# move rather than in one of their own (a mark only has to outlive its row).
_spent: list[str] = []
_spent_lock = threading.Lock()
MAX_SPENT = 500  # then they go at once, in one round trip


def spend(marks: Sequence[str]) -> None:
    with _spent_lock:
        _spent.extend(marks)
        if len(_spent) < MAX_SPENT:
            return
        batch = _spent[:]
        _spent.clear()
    try:
        OutboxMarks(get_redis()).clear(batch)
    except REDIS_DOWN:
        pass  # they expire at their TTL


def _take_spent() -> list[str]:
    with _spent_lock:
        batch = _spent[:]
        _spent.clear()
    return batch


@on_reset
def _forget_spent() -> None:
    _take_spent()  # another Redis, perhaps: those marks expire at their TTL


def clear_marks(outcomes: Sequence[Outcome]) -> None:
    """Delete the marks of rows now gone; an outage leaves them to their TTL."""
    marks = [outcome.mark for outcome in outcomes if outcome.mark]
    try:
        OutboxMarks(get_redis()).clear(marks)
    except REDIS_DOWN:
        pass


