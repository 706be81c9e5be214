"""Steps and helpers of the task records: skip a cancelled message, stop a cancelled
attempt, and the record write of each outcome.

No step sends a round trip of its own: an outcome's record goes to the acker with its
ack (`Executor.record`, sent in the same `Broker.settle` batch); a started task's
"running" record is written by the heartbeat thread within milliseconds of its start,
for every task started meanwhile in one round trip, and its progress with the heartbeat
(`worker/keepalive.py`).
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING

from django_taskrunner.core import clock
from django_taskrunner.core import unique as locks
from django_taskrunner.core.records import PENDING_TTL_S, TRACEBACK_MAX_CHARS, encode_value
from django_taskrunner.core.steps import first_run
from django_taskrunner.shim import framework_result_ttl
from django_taskrunner.store.records import RecordWrite
from django_taskrunner.worker.steps.locks import release_locks
from django_taskrunner.worker.steps.run import Run
from django_taskrunner.worker.steps.workflow import note_outcome

if TYPE_CHECKING:
    from django_taskrunner.core.message import TaskMessage
    from django_taskrunner.worker.executor import Executor
    from django_taskrunner.worker.running import Attempt

NULL_JSON = "null"  # encode_value(None)[0]
TRACE_ERROR_CHARS = 300  # of an attempt's error in its trace (the record keeps the last whole)
_NONE: frozenset[str] = frozenset()


def skip_cancelled(executor: Executor, run: Run) -> bool:
    """False after acking a message cancelled before it started (its fetch, the heartbeat
    or a cancel notice said so): it never runs; what it holds is freed here (the cancel
    left its lock to the worker that fetched it)."""
    message = run.message
    assert message is not None
    if not executor.cancels.should_skip(run.shard, run.stream_id, locks.holder_value(message),
                                        executor.cancelled.get(run.shard, _NONE)):
        return True
    release_locks(executor, run, locks.CANCELLED)
    write_outcome(executor, run, "cancelled", uncancel=run.shard)
    executor.ack(run.shard, run.stream_id)
    return False


def stop_cancelled(executor: Executor, run: Run) -> bool:
    """False after settling an attempt someone cancelled while it ran: not retried,
    what it holds freed, its record "cancelled"."""
    attempt = run.attempt
    if attempt is None or not attempt.cancel_requested:
        return True
    release_locks(executor, run, locks.CANCELLED)
    write_outcome(executor, run, "cancelled", uncancel=run.shard)
    executor.ack(run.shard, run.stream_id)
    return False


def record_ttl(executor: Executor, run: Run) -> int:
    """Seconds the finished record of this run is kept (0: its task keeps none); an
    attempt begun by the executor knows it already (one a hand-back built does not)."""
    if run.attempt is not None and run.attempt.record_ttl > 0:
        return run.attempt.record_ttl
    task = run.task
    own = None if task is None else task.options.result_ttl
    if run.message is not None:  # a Django Tasks backend's own RESULT_TTL
        own = framework_result_ttl(run.message.task_name, run.message.payload, own)
    return executor.result_ttl if own is None else own


def write_outcome(
    executor: Executor, run: Run, status: str, *, error: BaseException | None = None,
    traceback: str | None = None, uncancel: str = "",
) -> None:
    """Hand the record of an outcome to the acker: succeeded (with the result), failed,
    expired, cancelled (final) or retrying (the next attempt's, not final)."""
    message, attempt = run.message, run.attempt
    ttl = record_ttl(executor, run)
    if message is None or ttl <= 0 or not message.task_name:
        if message is not None and message.workflow is not None:
            note_outcome(executor, run, status)
        return
    final = status != "retrying"
    now_ms = clock.now_ms()
    fields = [("s", status), ("t", message.task_name), ("q", message.queue),
              ("a", str(message.attempt + (0 if final else 1))), ("w", executor.consumer)]
    fields += (end_fields(message, now_ms) if final
               else [("d", str(message.dispatched_at_ms)), ("ttl", str(ttl))])
    if attempt is not None:  # its start, and its trace (the task page's timeline)
        fields += [("st", str(attempt.started_ms)),
                   attempt_trace(executor, message.attempt, attempt, status, error, now_ms)]
    if message.dispatch_token is not None:  # a later dispatch of its task_id is not ours
        fields.append(("h", locks.holder_value(message)))
    if status == "succeeded" and attempt is not None:
        if attempt.result is None:  # most tasks: the JSON of None, without building an encoder
            fields.append(("r", NULL_JSON))
        else:
            encoded, why = encode_value(attempt.result, "result")
            fields.append(("r", encoded) if encoded is not None else ("e", why or ""))
    if error is not None:
        fields += [("e", f"{type(error).__name__}: {error}"),
                   ("ec", f"{type(error).__module__}.{type(error).__qualname__}")]
        if traceback:
            fields.append(("tb", traceback[-TRACEBACK_MAX_CHARS:]))
    executor.record(RecordWrite(message.id, tuple(fields), ttl if final else PENDING_TTL_S,
                                final=final, uncancel=uncancel, steps=may_have_steps(run),
                                cancel_member=locks.holder_value(message)))
    if message.workflow is not None:  # after its record: the next step reads its result
        note_outcome(executor, run, status)


def end_fields(message: TaskMessage, now_ms: int) -> list[tuple[str, str]]:
    """A final record keeps the dispatch's 'd', needs no 'ttl' any more, and gets its end
    (`now_ms`) and the payload it ran with (its message leaves Redis with this ack: the
    task page shows it from here; one too large or not JSON is left out)."""
    fields = [("f", str(now_ms))]
    payload, _why = encode_value(message.payload, "payload")
    if payload is not None:
        fields.append(("pl", payload))
    return fields


def may_have_steps(run: Run) -> bool:
    """Whether the task id of `run` may have kept durable steps, which its record writes
    then give the record's TTL: a context-taking task's, but for a first run of its id
    (`core.steps.first_run`) that kept none."""
    task, attempt = run.task, run.attempt
    if task is not None and not task.options.takes_context:
        return False
    if attempt is not None:
        return not attempt.first_run or attempt.kept_steps
    return run.message is None or not first_run(run.message, run.delivery.runs)


def attempt_trace(executor: Executor, number: int, attempt: Attempt, status: str,
                  error: BaseException | None, ended_ms: int | None = None) -> tuple[str, str]:
    """The record field `x:<attempt>` of an ended attempt (`core.records.AttemptTrace`):
    [ready ms (its stream entry's id), started, ended (`ended_ms`, by default now),
    worker, outcome, error]: the text `json.dumps` gives that list, put together here
    (one per task: json's encoder costs more than the rest of the record)."""
    ready, _sep, _seq = (attempt.stream_id or "").partition("-")
    why = '""' if error is None else json.dumps(
        f"{type(error).__name__}: {error}"[:TRACE_ERROR_CHARS])
    ended = clock.now_ms() if ended_ms is None else ended_ms
    return (f"x:{number}", f"[{int(ready) if ready.isdigit() else 'null'}, "
                           f"{int(attempt.started_ms)}, {int(ended)}, "
                           f"{_json_text(executor.consumer)}, {_json_text(status)}, {why}]")


@functools.lru_cache(maxsize=64)
def _json_text(value: str) -> str:
    """`json.dumps` of a string a worker writes again and again (its name, an outcome)."""
    return json.dumps(value)


def started_write(attempt: Attempt, consumer: str) -> RecordWrite:
    """The record of an attempt running now ("running", its worker, start time), for
    the heartbeat thread's start write or beat; with its progress, if it gave one since
    the last beat."""
    message = attempt.message
    fields = [("s", "running"), ("t", message.task_name), ("q", message.queue),
              ("a", str(message.attempt)), ("w", consumer), ("st", str(attempt.started_ms)),
              ("d", str(message.dispatched_at_ms)), ("ttl", str(attempt.record_ttl))]
    if attempt.stream_id:  # a retried attempt runs from an entry of its own
        fields.append(("sid", attempt.stream_id))
        if attempt.shard != message.queue:
            fields.append(("sh", attempt.shard))
    if message.dispatch_token is not None:
        fields.append(("h", locks.holder_value(message)))
    progress = attempt.take_progress()
    if progress is not None:
        fields.append(("p", progress))
    return RecordWrite(message.id, tuple(fields), PENDING_TTL_S,
                       steps=attempt.task.options.takes_context and not attempt.first_run)


def progress_write(attempt: Attempt) -> RecordWrite | None:
    """The progress an attempt gave since the last beat, or None."""
    progress = attempt.take_progress()
    if progress is None:
        return None
    return RecordWrite(attempt.message.id, (("p", progress),), PENDING_TTL_S)


def requeued_write(attempt: Attempt) -> RecordWrite | None:
    """The record of a running attempt a stopping worker puts back on its stream
    ("queued" again), or None when its task keeps no record or it was never written."""
    if attempt.record_ttl <= 0 or not attempt.start_recorded:
        return None
    message = attempt.message
    fields = [("s", "queued"), ("a", str(message.attempt)), ("w", "")]
    if message.dispatch_token is not None:
        fields.append(("h", locks.holder_value(message)))
    return RecordWrite(message.id, tuple(fields), PENDING_TTL_S,
                       steps=attempt.task.options.takes_context)
