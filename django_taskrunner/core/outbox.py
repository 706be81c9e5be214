"""The transactional outbox: a dispatch written in the caller's transaction, moved to
Redis once it commits, and never lost or queued twice on the way.

`put()` inserts one `OutboxMessage` row (the message as it will be queued) in the
current transaction of the database, and asks Django to call `send_now()` on commit: a
rollback leaves nothing, a commit leaves a row that some flush will move. `send_now()`
is the fast path, in the committing process: one `enqueue.lua` call, then the row's
DELETE. When Redis is down (or the process dies first) the row stays, and `flush()`
(the leader's `core/outbox.py`, the admin's "flush now", `runtasks --burst`)
moves the rows left, oldest first.

Exactly once: every row goes through `enqueue.lua` with a reservation whose value is
the message's holder (its task_id, or the row's mark), so a flush that crashed after
Redis took the message but before the row was deleted adds nothing the next time. A
message with a `task_id` reserves that id as usual; any other takes the row's mark
instead (`keys.outbox_mark_key`, TTL `MARK_TTL_MS`) in the script's task-id slot. The
marks of rows gone are deleted (`clear_marks`, or, after the fast path, in the round
trip of the next move: `spend`).

Unique locks and task ids are taken when the row is moved, by the same script as a
direct dispatch; a conflict (lock or id held by another task) is logged and written as a
`FailedTask` row (class `TaskAlreadyDispatched` or `TaskIdConflict`), so it is never
lost silently. So is a row whose task is no longer registered, or whose body cannot be
decoded (rows from another release).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from django.db import (
    DEFAULT_DB_ALIAS,
    DatabaseError,
    close_old_connections,
    connections,
    transaction,
)
from django.db.models import F
from django.utils import timezone

from django_taskrunner.conf import get_settings, on_reset
from django_taskrunner.core import sharding
from django_taskrunner.core.clock import now_ms
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.core.outbox_rows import Row, failed_model, outbox_model
from django_taskrunner.core.records import dispatch_record
from django_taskrunner.core.registry import registry
from django_taskrunner.core.sending import announce_queue, fair_queue
from django_taskrunner.core.unique import (
    TASK_ID_TTL_MS,
    LockSpec,
    UniqueClaim,
    holder_id,
    holder_value,
    reservation_for,
)
from django_taskrunner.exceptions import (
    InvalidTaskOptions,
    InvalidTaskPayload,
    TaskAlreadyDispatched,
    TaskIdConflict,
    TaskNotFound,
)
from django_taskrunner.store import get_store, keys
from django_taskrunner.store.connection import text
from django_taskrunner.store.errors import REDIS_DOWN
from django_taskrunner.store.locks import Reservation
from django_taskrunner.store.records import RecordWrite

logger = logging.getLogger(__name__)

FLUSH_BATCH = 100
# Marks what the flushers write as the FailedTask row's worker.
FLUSHER = "outbox"


# -- writing (inside the caller's transaction) -------------------------------------------

def put(message: TaskMessage, body: str, claim: UniqueClaim | None,
        using: str | None = None) -> TaskMessage:
    """Write `message` to the outbox of `using` in its current transaction, and move it to
    Redis once that commits (at once outside a transaction). Returns `message`: its id is
    the task's id, for `lookup()`, from now on."""
    alias = using or DEFAULT_DB_ALIAS
    lock = None if claim is None else claim.lock
    if lock is not None and lock.on_conflict != declared_policy(message):
        # The row keeps the message, not the call's options: the flush reads the task's.
        raise InvalidTaskOptions(
            f"dispatch of task {message.task_name!r} through the outbox takes the task's "
            f"declared on_conflict, not on_conflict={lock.on_conflict!r} per call: declare "
            f"it on the task, or dispatch with transactional=False outside the outbox")
    row = outbox_model().objects.using(alias).create(
        message_id=message.id, task_name=message.task_name, queue=message.queue,
        shard="" if claim is None else claim.shard,
        lock_ttl_ms=0 if lock is None else lock.ttl_ms, body=body, created_at=timezone.now())
    pending = Row.of(row)
    transaction.on_commit(lambda: send_now(pending, alias), using=alias)
    return message


def send_now(row: Row, using: str = DEFAULT_DB_ALIAS) -> None:
    """The fast path after commit: move the row, then delete it. Never raises (it runs
    among Django's on-commit callbacks, after the caller's data is saved): whatever
    goes wrong leaves the row for the next flush, with one log line."""
    try:
        outcomes = move([row])
    except REDIS_DOWN as exc:
        logger.warning("task=%s id=%s queue=%s waits in the outbox: Redis is unreachable "
                       "(%s); it is queued when Redis is back", row.task_name,
                       row.message_id, row.queue, exc)
        return
    except Exception:
        logger.exception("task=%s id=%s waits in the outbox: moving it failed",
                         row.task_name, row.message_id)
        return
    try:
        if any(outcome.status == FAILED for outcome in outcomes) or not _delete_unsynced(
                [row.pk], using):
            with transaction.atomic(using=using):
                _no_flush_wait(using)
                settle(outcomes, using)
        else:
            _announce_sent(outcomes)
    except Exception:
        logger.exception("task=%s id=%s: queued, but its outbox row could not be deleted; "
                         "the next flush finds it queued already", row.task_name,
                         row.message_id)
        return
    spend([outcome.mark for outcome in outcomes if outcome.mark])


def _delete_unsynced(pks: Sequence[int], using: str) -> bool:
    """DELETE the rows in one statement of its own (autocommit) that commits without
    waiting for the disk (`_no_flush_wait`); False where that is not possible (not
    PostgreSQL, or inside a transaction), for `settle()` to do instead."""
    connection = connections[using]
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        return False
    table = connection.ops.quote_name(outbox_model()._meta.db_table)
    with connection.cursor() as cursor:
        # set_config(..., true) lasts until this statement's own transaction ends, so its
        # COMMIT, and nothing after it, skips the wait.
        cursor.execute(f"DELETE FROM {table} USING (SELECT set_config('synchronous_commit', "  # noqa: S608 - a quoted table name
                       f"'off', true)) AS unsynced WHERE {table}.id = ANY(%s)", [list(pks)])
    return True


def _no_flush_wait(using: str) -> None:
    """On PostgreSQL, let this transaction's COMMIT return before its WAL is on disk.

    The fast path's DELETE need not be durable: lost in a database crash, its row comes
    back and the next flush finds the row's mark (or its task_id reservation) in Redis,
    so it only deletes the row again. Waiting for the disk would cost a second flush
    per dispatch, beside the one the caller's own COMMIT already paid.
    """
    connection = connections[using]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")


# -- settling (database) -----------------------------------------------------------------

def settle(outcomes: Sequence[Outcome], using: str = DEFAULT_DB_ALIAS) -> None:
    """Delete the rows moved (or never to be queued) and write a FailedTask row for each
    of the latter; call it inside a transaction, so both happen or neither."""
    for outcome in outcomes:
        if outcome.status == FAILED:
            _record_failed(outcome, using)
    outbox_model().objects.using(using).filter(
        pk__in=[outcome.row.pk for outcome in outcomes]).delete()
    _announce_sent(outcomes)


def _announce_sent(outcomes: Sequence[Outcome]) -> None:
    queues = {outcome.message.queue for outcome in outcomes
              if outcome.status == SENT and outcome.message is not None}
    broker = get_store().streams
    for queue in queues:
        announce_queue(broker, queue)


def _record_failed(outcome: Outcome, using: str) -> None:
    row, error = outcome.row, outcome.error
    message = outcome.message
    payload = row.body
    token = ""
    if message is not None:
        token = message.dispatch_token or ""
        try:
            payload = json.dumps(message.payload, ensure_ascii=False, sort_keys=True)
        except (TypeError, ValueError):
            payload = row.body
    cls = type(error)
    text_error = f"{cls.__name__}: {error}"
    logger.warning("task=%s id=%s queue=%s not queued from the outbox: %s", row.task_name,
                   row.message_id, row.queue, text_error)
    failed_model().objects.using(using).get_or_create(
        message_id=row.message_id[:255], dispatch_token=token, defaults={
            "task_name": row.task_name[:255], "queue": row.queue[:100], "payload": payload,
            "error_class": f"{cls.__module__}.{cls.__qualname__}"[:255], "error": text_error,
            "traceback": "", "attempts": 0, "worker": FLUSHER, "failed_at": timezone.now()})


# -- flushing (what is left) -------------------------------------------------------------

def _take(batch: int, using: str) -> list[Row]:
    """The oldest rows no other flusher holds, locked until this transaction ends.

    PostgreSQL (and any database with SKIP LOCKED): SELECT ... FOR UPDATE SKIP LOCKED, so
    flushers side by side take different rows. SQLite has no row locks: a first UPDATE
    (which changes nothing) takes the database's write lock, so a second flusher waits
    for this one's commit and then finds the rows gone.
    """
    manager = outbox_model().objects.using(using)
    oldest = manager.order_by("pk")
    if connections[using].features.has_select_for_update_skip_locked:
        return [Row.of(row) for row in oldest.select_for_update(skip_locked=True)[:batch]]
    manager.filter(pk__in=oldest.values("pk")[:batch]).update(attempts=F("attempts"))
    return [Row.of(row) for row in oldest[:batch]]


def flush(batch: int = FLUSH_BATCH, using: str = DEFAULT_DB_ALIAS) -> int:
    """Move up to `batch` of the oldest rows; returns how many rows were settled.

    Redis outage errors pass through (the rows stay, their `attempts` counted, their
    `last_error` set). Safe to run in many processes at once.
    """
    taken: list[Row] = []
    if not outbox_model().objects.using(using).exists():
        return 0  # the usual case: one small read, no transaction, no lock
    try:
        with transaction.atomic(using=using):
            taken = _take(batch, using)
            if not taken:
                return 0
            outcomes = move(taken)
            settle(outcomes, using)
    except REDIS_DOWN as exc:
        outbox_model().objects.using(using).filter(pk__in=[row.pk for row in taken]).update(
            attempts=F("attempts") + 1, last_error=f"Redis unreachable: {exc}"[:1000])
        raise
    clear_marks(outcomes)
    return len(outcomes)


def flush_all(using: str = DEFAULT_DB_ALIAS, batch: int = FLUSH_BATCH,
              max_batches: int | None = None) -> int:
    """`flush()` until the outbox is empty (or `max_batches` ran); how many were settled."""
    total = done = 0
    while max_batches is None or done < max_batches:
        moved = flush(batch, using)
        total += moved
        done += 1
        if moved < batch:
            break
    return total


def enabled() -> bool:
    """Whether on-commit dispatches go through the outbox (`TASKRUNNER["OUTBOX"]`)."""
    settings = get_settings()
    return bool(settings.OUTBOX) and not settings.EAGER


# -- the move to Redis (one pipelined round trip, exactly once) ---------------------------

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


def _claim(message: TaskMessage, row: Row, prefix: str) -> UniqueClaim | None:
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
    return UniqueClaim(message.task_name, message.id, lock, id_key, mode_key=mode_key, shard=shard,
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
    # A fair message (or any of a fair queue) goes through the delayed set, due now: its
    # promotion puts it in its key's turn (store/fair.py), as a direct dispatch of it
    # does (core/sending.py).
    fair_due = None if message.fair_key is None and not fair_queue(broker, shard) else now_ms()
    if claim is None:
        reservation = Reservation(
            destination=broker.stream(shard) if fair_due is None else keys.delayed_key(
                prefix, shard), body=row.body, holder=holder_value(message), id_key=id_key,
            id_ttl_ms=id_ttl_ms, due_ms=fair_due,
            wake_channel="" if fair_due is None else keys.wake_channel(prefix, shard))
    else:
        quiet_ms = None if claim.lock is None else claim.lock.debounce_ms
        due_ms = fair_due if quiet_ms is None else now_ms() + quiet_ms
        reservation = replace(reservation_for(claim, broker, message, row.body, due_ms),
                              id_key=id_key, id_ttl_ms=id_ttl_ms)
    return outcome, reservation, dispatch_record(message, task, shard, claim=claim)


def move(rows: Sequence[Row]) -> list[Outcome]:
    """Queue each row's message (one pipelined round trip for all); an outcome per row.

    Redis outage errors pass through: then nothing is known of what was queued, and the
    rows stay for the next move, whose marks tell.
    """
    broker = get_store().streams
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
            replies = get_store().locks.add_reserved_many([plan[1] for plan in planned],
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
        get_store().outbox.clear(batch)
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
        get_store().outbox.clear(marks)
    except REDIS_DOWN:
        pass


# The leader's outbox flusher: moves the rows the fast path left behind (Redis was
# down, or the web process died between its commit and the move) onto their streams.
#
# A thread beside the scheduler, in the worker that leads. Every `INTERVAL_SECONDS` it
# runs `core.outbox.flush_all`, which is safe side by side with the fast path and with
# any other flusher (row locks, and marks in Redis: `core/py`), so a lease
# hand-over that leaves two leaders for a moment queues nothing twice.


INTERVAL_SECONDS = 1.0  # an empty outbox costs one small SELECT this often
BATCHES_PER_TURN = 50  # 5,000 rows, then a pause, so a backlog does not hog the database


class OutboxFlusher(threading.Thread):
    """Flushes the outbox of database `using` until `stop()`."""

    def __init__(self, *, interval: float = INTERVAL_SECONDS,
                 using: str = DEFAULT_DB_ALIAS) -> None:
        super().__init__(name="taskrunner-outbox", daemon=True)
        self.interval = interval
        self.using = using
        self.moved = 0  # rows settled so far
        self._stopping = threading.Event()

    def stop(self, timeout: float = 10.0) -> None:
        """Finish the current batch and end the thread."""
        self._stopping.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)

    def run(self) -> None:
        down = False
        try:
            while not self._stopping.is_set():
                down = self.turn(down)
                self._stopping.wait(self.interval)
        finally:
            connections[self.using].close()

    def turn(self, down: bool) -> bool:
        """One flush of everything waiting; returns whether Redis is down now (logged
        once when an outage starts and once when it ends)."""
        close_old_connections()
        try:
            moved = flush_all(self.using, max_batches=BATCHES_PER_TURN)
        except REDIS_DOWN as exc:
            if not down:
                logger.warning("outbox: Redis is unreachable (%s); its rows wait", exc)
            return True
        except DatabaseError as exc:
            logger.warning("outbox: cannot read the outbox table (%s); retrying", exc)
            return down
        except Exception:
            logger.exception("outbox: unexpected error; going on")
            return down
        self.moved += moved
        if down:
            logger.warning("outbox: Redis is back; moved %d waiting task(s)", moved)
        elif moved:
            # The usual reason is a race, not a loss: a row is visible from its commit until
            # its dispatching process has moved it (slowest on its first dispatch, which
            # connects to Redis and loads the scripts), and either mover queues it once.
            logger.debug("outbox: moved %d task(s) before (or instead of) their dispatching "
                         "process", moved)
        return False


def flush_waiting(using: str = DEFAULT_DB_ALIAS) -> int:
    """`runtasks --burst`, which runs no leader: move what waits in the outbox now, so it
    counts as due work; 0 (logged) when the outbox or Redis cannot be reached."""
    try:
        return flush_all(using, max_batches=BATCHES_PER_TURN)
    except REDIS_DOWN as exc:
        logger.error("burst: cannot move the outbox's tasks (%s); retrying", exc)
    except DatabaseError as exc:
        logger.warning("burst: cannot read the outbox table (%s)", exc)
    return 0
