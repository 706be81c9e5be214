"""Task records: `lookup`, `wait`, `cancel`, `TaskRecord`, and the fields a record holds.

Every dispatched task has a record under its id (the message id, the same across
retries), written in round trips that happen anyway: with the dispatch's XADD (but for a
plain dispatch, whose id names its stream entry: `lookup` reads the entry until the
worker writes the record), in the worker's acker batch (the outcome) and heartbeat batch
(started, progress, the cancel flag). A finished record is kept `RESULT_TTL` seconds
(per task `@task(result_ttl=...)`; 0 writes none for that task); one still queued or
running `PENDING_TTL_S` at least, renewed while it runs. The commands are
`store/records.py`'s (`Records`).
"""

from __future__ import annotations

import json
import logging
import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError

from django_taskrunner.conf import get_settings
from django_taskrunner.core import clock, outbox_rows
from django_taskrunner.core.context import kept_steps
from django_taskrunner.core.eager import eager_records
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.core.registry import registry
from django_taskrunner.exceptions import InvalidTaskPayload
from django_taskrunner.store import entries, get_store, keys
from django_taskrunner.store.connection import bounded, built_client, get_redis
from django_taskrunner.store.errors import REDIS_DOWN, unavailable, unreadable
from django_taskrunner.store.records import (
    CANCELLED_TTL_S,
    FINAL_STATUSES,
    CancelReply,
    Records,
    RecordWrite,
)

if TYPE_CHECKING:
    from django_taskrunner.core.task import Task
    from django_taskrunner.core.unique import UniqueClaim

logger = logging.getLogger(__name__)

__all__ = ["FINAL_STATUSES", "TaskRecord", "cancel", "lookup", "wait"]

# A result, or a progress value, is kept up to this many bytes of JSON; a larger one is
# refused with a message (the task still succeeds; `set_progress` raises ValueError).
VALUE_MAX_BYTES = 64 * 1024
# The part of a failed task's traceback a record keeps (its FailedTask row has it all).
TRACEBACK_MAX_CHARS = 16 * 1024
# The part of an attempt's error its trace keeps (the record keeps the last one whole).
TRACE_ERROR_CHARS = 300
# A finished record keeps the message its task ran with (field 'm': its stream entry's
# body, as the worker read it, whose payload the task page shows) when the body is at
# most this many bytes: a payload of up to VALUE_MAX_BYTES of JSON and its envelope.
KEPT_MESSAGE_MAX_BYTES = VALUE_MAX_BYTES + 4096
# A record not finished yet lives at least this long (a delayed one: past its due time),
# renewed each time its worker writes it; a task id stays reserved as long.
PENDING_TTL_S = 7 * 24 * 3600
# How long `cancel()` waits for the worker that fetched the message to answer that it
# skips it (or runs it and told it): past it, a worker that missed the notice (its
# pub/sub connection dropped) or died reads the cancel with its heartbeat or reclaim.
CANCEL_ANSWER_S = 1.0
# A worker beats for every message it holds at least every 10 s: an entry idle longer has
# no live holder (it died, or stalls), and `cancel()` does not wait for its answer.
HOLDER_SILENT_MS = 11_000
# The last line of the cancel notice of `cancel(id, terminate=True)` (worker/cancels.py).
TERMINATE_NOTICE = "terminate"
# Longest single block of `wait()` (under the client's socket timeout); it loops.
WAIT_SLICE_S = 5.0
# How far past its timeout `wait()` may return when Redis does not answer: the time a
# healthy server has to answer the last command (a loaded machine's scheduling delays).
WAIT_MARGIN_S = 0.25


@dataclass(frozen=True)
class AttemptTrace:
    """One ended attempt of a task, as its record keeps it (field `x:<attempt>`): when its
    message became ready on the stream, when it started and ended (epoch ms), on which
    worker, how it ended (succeeded, retrying, failed, cancelled) and its error."""

    number: int
    ready_ms: int | None
    started_ms: int
    ended_ms: int
    worker: str
    outcome: str
    error: str


def attempt_traces(fields: Mapping[str, str]) -> tuple[AttemptTrace, ...]:
    """The `x:<n>` fields of a record, and a finished record's last attempt (`_last_trace`);
    one that does not parse is left out."""
    found = []
    for name, raw in fields.items():
        number = name[2:]
        if not (name.startswith("x:") and number.isdigit()):
            continue
        try:
            ready, started, ended, worker, outcome, error = json.loads(raw)
            found.append(AttemptTrace(int(number), None if ready is None else int(ready),
                                      int(started), int(ended), str(worker), str(outcome),
                                      str(error)))
        except (ValueError, TypeError):
            continue
    last = _last_trace(fields, found)
    if last is not None:
        found.append(last)
    return tuple(sorted(found, key=lambda trace: trace.number))


def _last_trace(fields: Mapping[str, str], traced: list[AttemptTrace]) -> AttemptTrace | None:
    """The trace of a finished record's last attempt, which its final write keeps in the
    record's own fields, not again as `x:<n>`: attempt 'a', ready at its entry's time
    ('sid'), started 'st', ended 'f', worker 'w', outcome 's', error 'e'. None when the
    record is not finished, or its last attempt never started: a start ('st') no later
    than a traced attempt's is that attempt's (a retry's record keeps it until the next
    attempt starts; the task was then cancelled or expired while it waited)."""
    status, attempt = fields.get("s"), fields.get("a", "1")
    started, ended = fields.get("st", ""), fields.get("f", "")
    if (status not in FINAL_STATUSES or not started.isdigit() or not ended.isdigit()
            or not attempt.isdigit()):
        return None
    number, started_ms = int(attempt), int(started)
    if any(trace.number >= number or trace.started_ms >= started_ms for trace in traced):
        return None
    ready = fields.get("sid", "").partition("-")[0]
    error = "" if status == "succeeded" else fields.get("e", "")[:TRACE_ERROR_CHARS]
    return AttemptTrace(number, int(ready) if ready.isdigit() else None, started_ms,
                        int(ended), fields.get("w", ""), status, error)


@dataclass(frozen=True)
class LimitWait:
    """One wait of a task on a rate or concurrency limit: when it began (its first
    refusal), when it got its slot (None: it still waits), and which limit ("rate 5/s")."""

    since_ms: int
    ended_ms: int | None
    limit: str


def limit_waits(fields: Mapping[str, str]) -> tuple[LimitWait, ...]:
    """The ended waits (`lx:<since>` fields) and the current one (`lws`, `lw`), oldest
    first; one that does not parse is left out. A task that ended while it waited (it was
    cancelled in the delayed set) keeps its wait, ended when the task ended."""
    found = []
    for name, raw in fields.items():
        if not name.startswith("lx:"):
            continue
        try:
            since, ended, limit = json.loads(raw)
            found.append(LimitWait(int(since), int(ended), str(limit)))
        except (ValueError, TypeError):
            continue
    since, end = fields.get("lws", ""), fields.get("f", "")
    if since.isdigit() and fields.get("s") == "delayed":
        found.append(LimitWait(int(since), None, fields.get("lw", "")))
    elif since.isdigit() and end.isdigit():  # it ended while waiting (cancelled, say)
        found.append(LimitWait(int(since), int(end), fields.get("lw", "")))
    return tuple(sorted(found, key=lambda wait: wait.since_ms))


@dataclass(frozen=True)
class TaskRecord:
    """What is known of one task: its status, outcome, progress and times."""

    id: str
    status: str  # delayed | queued | running | retrying | succeeded | failed | cancelled | expired
    task_name: str
    queue: str
    attempt: int
    worker: str | None
    result: Any
    error: str | None
    traceback: str | None
    progress: Any
    dispatched_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    due_at: datetime | None  # a delayed task's start time
    cancel_requested: bool
    # Where its message was last added or started: the stream entry id and the stream (the
    # queue, or one shard of it); None when the record does not know (a cluster, a
    # delayed task moved by the scheduler, a retry not started yet).
    stream_id: str | None = None
    shard: str | None = None
    # Durable steps kept for this task id: name -> {"result": ..., "at": unix seconds}
    # (core/context.py); filled by `lookup`, empty elsewhere.
    steps: dict[str, Any] = field(default_factory=dict)
    # Each ended attempt, oldest first (what the task page's timeline draws).
    attempts: tuple[AttemptTrace, ...] = ()
    # The payload a finished task ran with (None before it finished, or when its message
    # was over KEPT_MESSAGE_MAX_BYTES: its failed-task row has it then).
    payload: Any = None
    # Each wait on a rate or concurrency limit, oldest first (the timeline draws them).
    limit_waits: tuple[LimitWait, ...] = ()

    @property
    def finished(self) -> bool:
        """True for a final status: succeeded, failed, cancelled or expired."""
        return self.status in FINAL_STATUSES


def result_ttl(task: Task) -> int:
    """Seconds a finished record of `task` is kept: `@task(result_ttl=...)`, else the
    `RESULT_TTL` setting; 0: no record at all."""
    own = task.options.result_ttl
    return int(get_settings().RESULT_TTL if own is None else own)


def keeps_records(task: Task) -> bool:
    """Whether dispatches of `task` write a record (asked once for a whole batch)."""
    return result_ttl(task) > 0


# One encoder for every value: `json.dumps` with options builds a new one per call.
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def encode_value(value: Any, what: str) -> tuple[str | None, str | None]:
    """(JSON text, None), or (None, why it cannot be kept): not JSON, or too large."""
    if value is None:  # what most tasks return: no encoder call at all
        return "null", None
    try:
        encoded = _ENCODER.encode(value)
        size = len(encoded.encode("utf-8"))
    except (TypeError, ValueError, RecursionError) as exc:
        return None, f"{what} not kept: it cannot be encoded as JSON ({type(exc).__name__}: {exc})"
    if size > VALUE_MAX_BYTES:
        return None, (f"{what} not kept: {size:,} bytes of JSON, over the "
                      f"{VALUE_MAX_BYTES:,}-byte limit")
    return encoded, None


def dispatch_record(
    message: TaskMessage, task: Task, shard: str, due_ms: int | None = None,
    claim: UniqueClaim | None = None,
) -> RecordWrite | None:
    """The first write of a task's record ("queued", or "delayed" until `due_ms`);
    None when the task keeps no record."""
    ttl = result_ttl(task)
    return None if ttl <= 0 else _first_write(message, ttl, shard, due_ms, claim)


def entry_record(body: bytes | str, shard: str, due_ms: int | None = None) -> RecordWrite | None:
    """`dispatch_record` of the message in `body`, on `shard`, when its task id names its
    stream entry: a plain dispatch writes no record (`core.sending.add_now`), so a move
    of its message before any worker recorded it (put back at a stop, sent back by a
    paused queue, given up by a process that ended) writes it. None for any other
    message, one that does not decode, or a task that keeps no record."""
    if not entries.names_its_entry(body):  # most moves: no decoding
        return None
    try:
        message = TaskMessage.from_json(body)
    except InvalidTaskPayload:
        return None
    if entries.task_id_entry(message.id) is None:
        return None
    task = registry.find(message.task_name)
    ttl = int(get_settings().RESULT_TTL) if task is None else result_ttl(task)
    return None if ttl <= 0 else _first_write(message, ttl, shard, due_ms)


def _first_write(message: TaskMessage, ttl: int, shard: str, due_ms: int | None = None,
                 claim: UniqueClaim | None = None) -> RecordWrite:
    fields = [("s", "queued" if due_ms is None else "delayed"), ("t", message.task_name),
              ("q", message.queue), ("a", str(message.attempt)),
              ("d", str(message.dispatched_at_ms)), ("ttl", str(ttl))]
    if shard != message.queue:
        fields.append(("sh", shard))
    if due_ms is not None:
        fields.append(("due", str(due_ms)))
    if claim is not None:
        fields.append(("h", claim.value))
        if claim.lock is not None:
            fields.append(("lk", claim.lock.key))
        if claim.id_key is not None:
            fields.append(("ik", "1"))
    wait_s = 0 if due_ms is None else max(0, (due_ms - clock.now_ms()) // 1000)
    return RecordWrite(message.id, tuple(fields), PENDING_TTL_S + wait_s)


def dispatch_records(
    messages: Sequence[TaskMessage], task: Task, shards: Sequence[str],
) -> list[RecordWrite]:
    """`dispatch_record` of each message added now, onto its shard (a `dispatch_many`
    batch): messages alike but for their ids (one task, queue, attempt and dispatch
    time, one shard: a plain batch) share one tuple of fields, built once."""
    shared: dict[tuple[str, str, int, int, str], RecordWrite] = {}
    records = []
    for message, shard in zip(messages, shards, strict=True):
        alike = (message.task_name, message.queue, message.attempt, message.dispatched_at_ms,
                 shard)
        first = shared.get(alike)
        if first is not None:
            records.append(RecordWrite(message.id, first.fields, first.ttl_s))
            continue
        record = dispatch_record(message, task, shard)
        if record is None:  # the task keeps no record
            return []
        shared[alike] = record
        records.append(record)
    return records


def records() -> Records:
    """The records under the current settings' client and prefix."""
    return get_store().records


def _checked_id(task_id: Any) -> str | None:
    return task_id if isinstance(task_id, str) and task_id else None


def lookup(task_id: str) -> TaskRecord | None:
    """The record of `task_id`; None for an unknown id, or one whose record expired.

    A task written to the transactional outbox and not yet moved to Redis reads as
    "queued" (from its outbox row), also while Redis is down.

    Raises:
        RedisUnavailable: Redis could not be reached.
    """
    checked = _checked_id(task_id)
    if checked is None:
        return None
    if get_settings().EAGER:  # eager mode: the records of this process's runs, no Redis
        return _eager_record(checked)
    try:
        fields, entry = records().load_or_entry(checked, get_store().group)
    except REDIS_DOWN as exc:
        fields = _in_outbox(checked)  # a task still in the outbox has a "queued" record
        if fields is None:
            raise unreadable(f"cannot look task {checked!r} up", exc) from exc
        entry = None
    if entry is not None:  # a plain dispatch's, no worker recorded yet: its entry says
        _stream, stream_id = entries.task_id_entry(checked) or ("", "")
        fields = {**_entry_fields(checked, entry), "sid": stream_id}
    if fields is None:
        fields = _in_outbox(checked)
    if fields is None:
        return None
    return _with_steps(from_fields(checked, fields))


def _with_steps(rec: TaskRecord) -> TaskRecord:
    """The record with its kept durable steps (one HGETALL; none while Redis is down)."""

    try:
        return replace(rec, steps=kept_steps(rec.id))
    except REDIS_DOWN:
        return rec


def _entry_fields(task_id: str, body: bytes) -> dict[str, str]:
    """The "queued" record of a task whose id names its stream entry, no worker having
    recorded it yet, read from the entry (`entry_record`; its stream id is the caller's
    to add); one whose message does not decode gets its status only (its worker fails
    it, and records why)."""
    stream, _stream_id = entries.task_id_entry(task_id) or ("", "")
    write = entry_record(body, stream)
    return dict(write.fields) if write is not None else {"s": "queued"}


def _record_entry(store: Records, task_id: str) -> None:
    """Before `wait()` or `cancel()` writes to the record of a task whose id names its
    entry: the "queued" record from the entry, if no worker wrote one yet
    (`record_new.lua`: a record a worker writes meanwhile only gains the fields it
    lacks, never goes back to "queued")."""
    entry = entries.task_id_entry(task_id)
    if entry is None:
        return
    _fields, body = store.load_or_entry(task_id, get_store().group)
    if body is not None:
        fields = _entry_fields(task_id, body)  # `save_new` writes the stream id
        store.save_new([(RecordWrite(task_id, tuple(fields.items()), PENDING_TTL_S), entry[1])])


def _eager_record(task_id: str) -> TaskRecord | None:
    """Eager mode (`core/eager.py`): a task run eagerly in this process, final at once."""
    fields = eager_records.get(task_id)
    return None if fields is None else from_fields(task_id, fields)


def _in_outbox(task_id: str) -> dict[str, str] | None:
    """The "queued" fields of a task waiting in the outbox (docs/outbox.md), or None; None
    too when the outbox cannot be read (no table yet, the database down)."""
    try:
        return outbox_rows.waiting_fields(task_id)
    except DatabaseError:
        return None


def wait(task_id: str, timeout: float) -> TaskRecord | None:
    """Block until the task's record is final (or gone), at most `timeout` seconds.

    Blocks on Redis (BLMOVE on the record's done list), not a polling loop. Returns the
    final record, or None for an unknown id (or one whose record expired meanwhile).
    Returns within `timeout` plus `WAIT_MARGIN_S` whatever Redis does: each command it
    sends fails once that is past (`store.connection.bounded`).

    Raises:
        ValueError: `timeout` is not a positive, finite number of seconds.
        TimeoutError: the record was not final after `timeout` seconds.
        RedisUnavailable: Redis could not be reached, or did not answer in time.
    """
    if (isinstance(timeout, bool) or not isinstance(timeout, int | float)
            or not math.isfinite(timeout) or timeout <= 0):
        raise ValueError(f"wait() needs a positive number of seconds as timeout, not {timeout!r}")
    checked = _checked_id(task_id)
    if checked is None:
        return None
    if get_settings().EAGER:  # an eager run is final before its dispatch returned
        return _eager_record(checked)
    deadline = clock.monotonic() + timeout
    try:
        return _wait(checked, timeout, deadline)
    except REDIS_DOWN as exc:
        raise unreadable(f"cannot wait for task {checked!r}", exc) from exc


def _wait(task_id: str, timeout: float, deadline: float) -> TaskRecord | None:
    """`wait()`'s loop: read the record, block on its done list until final or
    `deadline`; every command bounded by the time left (and `WAIT_MARGIN_S`)."""
    # The client first, its build bounded by the wait (get_store() then finds it built).
    client = get_redis(within=timeout + WAIT_MARGIN_S)
    store = get_store()
    key = keys.record_key(store.prefix, task_id)
    with bounded(client, _left(deadline) + WAIT_MARGIN_S, key) as near:
        _record_entry(store.on_client(near).records, task_id)
    while True:
        with bounded(client, _left(deadline) + WAIT_MARGIN_S, key) as near:
            fields = store.on_client(near).records.watch(task_id)
        if fields is None:
            return None
        record = from_fields(task_id, fields)
        if record.finished:
            return record
        left = _left(deadline)
        if left <= 0:
            raise TimeoutError(f"task {task_id!r} is still {record.status} after {timeout:g}s")
        block = max(0.01, min(left, WAIT_SLICE_S))
        with bounded(client, block + WAIT_MARGIN_S, key) as near:
            store.on_client(near).records.wait_done(task_id, block)


def _left(deadline: float) -> float:
    return max(0.0, deadline - clock.monotonic())


def cancel(task_id: str, *, terminate: bool = False) -> bool:
    """Cancel a task: a delayed or queued one never starts, a running one sees
    `ctx.cancelled` at once (within a second when the worker missed the notice); its
    record ends "cancelled", it is not retried, and its unique lock and task id are
    freed: at once for a message no worker fetched yet, by the worker that fetched it
    when it skips or ends it. False for a finished or unknown id.

    `terminate=True` also stops a running task without its cooperation: `TaskInterrupted`
    is raised in its thread (an `async def` task is cancelled either way). It rides the
    cancel notice: a worker that missed the notice only sets `ctx.cancelled`.

    Raises:
        RedisUnavailable: Redis could not be reached.
    """
    checked = _checked_id(task_id)
    if checked is None:
        return False
    try:
        store = records()
        _record_entry(store, checked)
        reply = store.cancel(checked, clock.now_ms(), int(get_settings().RESULT_TTL) or 1,
                             terminate)
        if reply.outcome != "ok":
            return False
        if reply.shard:
            _cancel_entry(store, checked, reply, terminate)
    except REDIS_DOWN as exc:
        raise unavailable(f"cannot cancel task {checked!r}", exc, built_client()) from exc
    return True


def _cancel_entry(store: Records, task_id: str, reply: CancelReply,
                  terminate: bool = False) -> None:
    """The shard's part of a cancel (`cancel_entry.lua`): delete a message no worker
    fetched and free its keys, or leave them to the worker holding it and wait (up to
    `CANCEL_ANSWER_S`) for its answer, so a message it had not started never starts."""
    # The holder, not the id: a later dispatch of the same task_id is not skipped.
    holder = reply.holder or task_id
    releases = _releases(store.prefix, reply.shard, task_id, reply.lock_key,
                         reply.has_task_id) if reply.holder else []
    reply_key = keys.cancel_reply_key(store.prefix, task_id, secrets.token_hex(8))
    notice = "\n".join((reply_key, reply.shard, reply.stream_id, holder, task_id,
                        *((TERMINATE_NOTICE,) if terminate else ())))
    done = store.cancel_entry(get_store().group, reply.shard, reply.stream_id, holder,
                              reply.status == "running", releases, notice, CANCELLED_TTL_S)
    if done.outcome == "removed":  # no worker will see it: listed as finished here
        get_store().finished.list_task(
            keys.queue_of(reply.shard), task_id, clock.now_ms(),
            int(get_settings().RESULT_TTL) or 1)
    if done.outcome != "held" or done.idle_ms > HOLDER_SILENT_MS:
        return
    # The cancel took effect: a wait that fails (or times out) only loses the answer.
    timeout = min(CANCEL_ANSWER_S, 0.8 * float(get_settings().SOCKET_TIMEOUT))
    try:
        answer = store.wait_answer(reply_key, timeout)
    except REDIS_DOWN:
        answer = None
    if answer is None:
        logger.info("task %s: its worker %s did not answer the cancel within %gs; it sees "
                    "ctx.cancelled with its next heartbeat", task_id, done.consumer, timeout)


def _releases(prefix: str, shard: str, task_id: str, lock_key: str,
              has_task_id: bool) -> list[tuple[str, str]]:
    """The lock, its mode record and the task id a cancelled task holds, as
    (key, '0' | 'follow') for `cancel_entry.lua`."""
    actions: list[tuple[str, str]] = []
    if lock_key:
        actions += [(lock_key, "0"), (keys.unique_mode_key(prefix, shard, lock_key), "follow")]
    if has_task_id:
        actions.append((keys.task_id_key(prefix, shard, task_id), "0"))
    return actions


def _time(fields: Mapping[str, str], name: str) -> datetime | None:
    raw = fields.get(name)
    if not raw:
        return None
    try:
        return datetime.fromtimestamp(int(raw) / 1000, tz=UTC)
    except (ValueError, OverflowError):
        return None


def json_value(raw: str | None) -> Any:
    """A stored JSON text decoded; None for none, or for text that is not JSON."""
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def kept_payload(fields: Mapping[str, str]) -> Any:
    """The payload a finished record keeps: from the message it ran with ('m'), or, in a
    record an earlier release wrote, its own field ('pl'); None for none, or for a
    message that does not decode."""
    if "pl" in fields:
        return json_value(fields["pl"])
    message = json_value(fields.get("m"))
    return message.get("payload") if isinstance(message, dict) else None


def from_fields(task_id: str, fields: Mapping[str, str]) -> TaskRecord:
    """A `TaskRecord` from the record's hash fields (see `store/records.py`)."""
    status = fields.get("s", "queued")
    due = fields.get("due")
    if status == "delayed" and due and due.isdigit() and int(due) <= clock.now_ms():
        status = "queued"  # the scheduler moved it (or is about to): no write for that
    attempt = fields.get("a", "1")
    return TaskRecord(
        id=task_id, status=status, task_name=fields.get("t", ""), queue=fields.get("q", ""),
        attempt=int(attempt) if attempt.isdigit() else 1, worker=fields.get("w") or None,
        result=json_value(fields.get("r")), error=fields.get("e") or None,
        traceback=fields.get("tb") or None, progress=json_value(fields.get("p")),
        dispatched_at=_time(fields, "d"), started_at=_time(fields, "st"),
        finished_at=_time(fields, "f"), due_at=_time(fields, "due"),
        cancel_requested=fields.get("c") == "1",
        stream_id=fields.get("sid") or None, shard=fields.get("sh") or fields.get("q") or None,
        attempts=attempt_traces(fields), payload=kept_payload(fields),
        limit_waits=limit_waits(fields),
    )
