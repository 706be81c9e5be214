"""The transactional outbox: a dispatch written in the caller's transaction, moved to
Redis once it commits, and never lost or queued twice on the way.

`put()` inserts one `OutboxMessage` row (the message as it will be queued) in the
current transaction of the database, and asks Django to call `send_now()` on commit: a
rollback leaves nothing, a commit leaves a row that some flush will move. `send_now()`
is the fast path, in the committing process: one `enqueue.lua` call, then the row's
DELETE. When Redis is down (or the process dies first) the row stays, and `flush()`
(the leader's `scheduling/outbox_flush.py`, the admin's "flush now", `runtasks --burst`)
moves the rows left, oldest first.

Exactly once: every row goes through `enqueue.lua` with a reservation whose value is
the message's holder (its task_id, or the row's mark), so a flush that crashed after
Redis took the message but before the row was deleted adds nothing the next time. That
move is `core/outbox_move.py`'s; this module writes, deletes and locks the rows.

Unique locks and task ids are taken when the row is moved, by the same script as a
direct dispatch; a conflict (lock or id held by another task) is logged and written as a
`FailedTask` row (class `TaskAlreadyDispatched` or `TaskIdConflict`), so it is never
lost silently. So is a row whose task is no longer registered, or whose body cannot be
decoded (rows from another release).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import F
from django.utils import timezone

from django_taskrunner.conf import get_settings
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.core.outbox_move import (
    FAILED,
    SENT,
    Outcome,
    clear_marks,
    declared_policy,
    move,
    spend,
)
from django_taskrunner.core.outbox_rows import Row, failed_model, outbox_model
from django_taskrunner.core.sending import announce_queue
from django_taskrunner.core.unique import Claim
from django_taskrunner.exceptions import InvalidTaskOptions
from django_taskrunner.store.broker import get_broker
from django_taskrunner.store.errors import REDIS_DOWN

logger = logging.getLogger(__name__)

FLUSH_BATCH = 100
# Marks what the flushers write as the FailedTask row's worker.
FLUSHER = "outbox"


# -- writing (inside the caller's transaction) -------------------------------------------

def put(message: TaskMessage, body: str, claim: Claim | None,
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
    broker = get_broker()
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
