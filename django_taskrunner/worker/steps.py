"""The policies one delivery goes through, as small steps the executor calls in order.

A step is a function `step(executor, run) -> bool`. True lets the next step run; False
means the step settled the delivery (recorded it, acked it, or requeued it) and the rest
is skipped. The executor's two lists (`BEFORE_RUN`, `AFTER_RUN` in `executor.py`) are the
whole order; a new policy (a rate limit, a cancellation) is one new function here and one
new line there.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import random
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from django.dispatch import Signal

from django_taskrunner import signals, tracing
from django_taskrunner.conf import MAX_SECONDS, get_settings
from django_taskrunner.core import clock
from django_taskrunner.core import unique as locks
from django_taskrunner.core.context import first_run
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.core.options import LimitKeyError, limit_key_value, parse_rate
from django_taskrunner.core.records import (
    KEPT_MESSAGE_MAX_BYTES,
    PENDING_TTL_S,
    TRACE_ERROR_CHARS,
    TRACEBACK_MAX_CHARS,
    encode_value,
)
from django_taskrunner.core.registry import registry
from django_taskrunner.core.sending import fair_queue
from django_taskrunner.core.task import Task
from django_taskrunner.core.workflows import parent_result
from django_taskrunner.exceptions import (
    InvalidTaskPayload,
    TaskExpired,
    TaskNotFound,
    TimeLimitExceeded,
    WorkerLost,
)
from django_taskrunner.shim import framework_result_ttl, shown_name
from django_taskrunner.store import keys
from django_taskrunner.store.errors import REDIS_DOWN, REDIS_ERROR
from django_taskrunner.store.limits import Limits, Slot, Take
from django_taskrunner.store.records import RecordWrite
from django_taskrunner.store.workflows import MemberDone
from django_taskrunner.worker.fetcher import Delivery
from django_taskrunner.worker.running import Attempt

if TYPE_CHECKING:
    from django_taskrunner.core.message import TaskMessage
    from django_taskrunner.worker.executor import Executor
    from django_taskrunner.worker.running import Attempt





# `Run`: what the steps know of one delivery so far, filled in as it goes through them.

class Run:
    """One delivery on its way through the steps.

    A plain class with slots rather than a dataclass: one is built per delivery, and the
    steps read its shard, stream id and shown name several times each (attributes set
    once, not properties).
    """

    __slots__ = ("delivery", "shard", "stream_id", "message", "task", "attempt", "error",
                 "on_loop", "slots", "_shown")

    def __init__(
        self, delivery: Delivery, message: TaskMessage | None = None, task: Task | None = None,
        attempt: Attempt | None = None, error: BaseException | None = None,
        on_loop: bool = False, slots: tuple[Slot, ...] = (),
    ) -> None:
        self.delivery = delivery
        self.shard = delivery.shard  # the stream it was read from
        self.stream_id = delivery.stream_id
        self.message = message  # set by the decode step
        self.task = task  # set by the lookup step
        self.attempt = attempt  # set while and after the task function runs
        self.error = error  # what the attempt raised (None: it succeeded)
        self.on_loop = on_loop  # an async attempt handed to the event loop, which settles it
        self.slots = slots  # concurrency slots taken (`check_limits`, below)
        self._shown: str | None = None

    @property
    def shown_name(self) -> str:
        """The task name stats and metrics count this run under (`tasks.shown_name`: a
        Django Tasks framework task's own path, not the shim's); worked out once (its
        message's task name and payload do not change)."""
        shown = self._shown
        if shown is None:
            assert self.message is not None
            shown = self._shown = shown_name(self.message.task_name, self.message.payload)
        return shown


# The default retry backoff: exponential with jitter. Pure, so tests can pin it.

BASE_SECONDS = 1.0
CAP_SECONDS = 600.0


def default_backoff(retry: int, *, rand: random.Random | None = None) -> float:
    """Seconds to wait before retry number `retry` (1 for the first retry).

    The delay doubles with each retry up to `CAP_SECONDS`, and "equal jitter" keeps
    it in [half, full] of that, so many tasks failing at once do not retry in step.
    """
    ceiling = min(CAP_SECONDS, BASE_SECONDS * 2 ** max(retry - 1, 0))
    uniform = (rand or random).uniform
    return ceiling / 2 + uniform(0, ceiling / 2)


# Workflow members: count a member's final outcome, and read its parent's result.
#
# No step of its own and no round trip of its own: `write_outcome` (the record step) calls
# `note_outcome` for a message that carries a workflow field, and the member's completion
# (`store/workflows.py`, `workflow_member.lua`) goes to the acker with its ack, after its
# task record in the same batch. A task outside any workflow pays one field check.

# A record's final status -> how the workflow counts it (a retry is not final).
OUTCOMES = {"succeeded": "succeeded", "failed": "failed", "expired": "failed",
            "cancelled": "failed"}


def note_outcome(executor: Executor, run: Run, status: str) -> None:
    """Hand a workflow member's final outcome to the acker (its batch counts it)."""
    message = run.message
    outcome = OUTCOMES.get(status)
    if message is None or message.workflow is None or outcome is None:
        return
    workflow = message.workflow
    executor.workflow(MemberDone(workflow["id"], workflow["j"], workflow["k"], outcome,
                                 tuple(workflow.get("nx", ())), max(1, executor.result_ttl)))


def parent_reader(executor: Executor, message: TaskMessage) -> Callable[[], Any]:
    """`ctx.parent_result`'s reader for `message` (None outside a workflow)."""
    workflow = message.workflow
    if workflow is None:
        return lambda: None
    store = executor.broker.store.workflows
    return lambda: parent_result(store, workflow)


# Step: free an `until_executing` lock (and renew a task_id) as the task starts.
#
# The other releases happen where the outcome is settled (success, failure, drop), through
# `release_locks()`; retries free nothing: the lock and the task_id are kept across them.

logger = logging.getLogger(__name__)


def release_on_start(executor: Executor, run: Run) -> bool:
    """Record the pick-up, then free what the message frees when it starts."""
    assert run.message is not None and run.task is not None
    executor.stats.picked_up(run.message.queue, run.shown_name, run.stream_id,
                             run.delivery.runs)
    release_locks(executor, run, locks.STARTED)
    return True


def release_locks(executor: Executor, run: Run, event: str) -> None:
    """Free (or renew) the unique lock and task_id the message holds, per its mode."""
    message = run.message
    assert message is not None
    if message.lock_key is None and not message.has_task_id:
        return
    try:
        # The lock and task_id live in the shard's slot: core.unique finds their keys by
        # the message's queue, so it gets a copy naming the shard.
        stored = message if run.shard == message.queue else replace(message, queue=run.shard)
        locks.release_with(executor.broker.store.locks, stored, event)
    except Exception:
        # Never let a release undo the outcome: an entry left pending would run again.
        logger.exception("task=%s id=%s queue=%s: could not free its unique lock or task id "
                         "at %s; it frees at its TTL", message.task_name, message.id,
                         message.queue, event)


# What the worker tells the project about each attempt: the `django_taskrunner.tasks` log
# line, the signals (django_taskrunner/signals.py), the OpenTelemetry span and the figures.
#
# `count_run` is the step that counts an attempt's run time and outcome (the monitor writes
# them in batches, `stats/`). `announce_start` is a step (the last before the run);
# `finished` is called by the outcome steps once they settled the delivery. With no
# receiver connected, no tracing and the task lines off, each costs a few attribute checks.

# One INFO line per finished attempt; `runtasks -v 2` turns it on (docs/logging.md).
task_logger = logging.getLogger("django_taskrunner.tasks")

SUCCEEDED, RETRIED, FAILED = "succeeded", "retried", "failed"
OUTCOME_SIGNALS = {SUCCEEDED: signals.task_succeeded, RETRIED: signals.task_retried,
                   FAILED: signals.task_failed}
# The spans of the attempts running now, by id() of their message: the watchdog settles
# a stuck attempt with a Run of its own, but the same message object.
_spans: dict[int, tracing.ConsumerSpan] = {}


def log_fields(message: TaskMessage) -> dict[str, Any]:
    """`extra` of a log line about `message`: attributes of the record that a handler
    (Sentry's logging integration, a JSON formatter) can read; a framework task's own
    path, not the shim's."""
    return {"task_name": shown_name(message.task_name, message.payload), "task_id": message.id,
            "queue": message.queue}


def announce_start(executor: Executor, run: Run) -> bool:
    """Start the attempt's span and send `task_started`."""
    message = run.message
    assert message is not None
    if tracing.ENABLED:
        span = tracing.consumer_span(message)
        if span is not None:
            _spans[id(message)] = span
    if signals.task_started.receivers:
        send(signals.task_started, run.task, message=message)
    return True


def finished(run: Run, outcome: str, **details: Any) -> None:
    """Log, signal and end the span of an attempt whose outcome is settled."""
    message, error = run.message, run.error
    assert message is not None
    if _spans:
        span = _spans.pop(id(message), None)
        if span is not None:
            span.end(outcome, error)
    signal = OUTCOME_SIGNALS[outcome]
    log = task_logger.isEnabledFor(logging.INFO)
    if not (log or signal.receivers):
        return
    duration = run.attempt.elapsed() if run.attempt is not None else 0.0
    if log:
        task_logger.info(
            "task=%s id=%s queue=%s attempt=%d duration=%.3fs outcome=%s%s",
            run.shown_name, message.id, message.queue, message.attempt, duration, outcome,
            f" error={type(error).__name__}" if error is not None else "",
            extra={**log_fields(message), "outcome": outcome, "duration": duration})
    if signal.receivers:
        if error is not None:
            details["error"] = error
        send(signal, run.task, message=message, duration=duration, **details)


def send(signal: Signal, sender: Any, **kwargs: Any) -> None:
    """Send to every receiver; one that raises is logged, never raised into the worker."""
    message: TaskMessage = kwargs["message"]
    for receiver, response in signal.send_robust(sender, **kwargs):
        if isinstance(response, Exception):
            logger.error("signal receiver %s raised for task=%s id=%s queue=%s",
                         getattr(receiver, "__qualname__", receiver),
                         shown_name(message.task_name, message.payload),
                         message.id, message.queue, exc_info=response,
                         extra=log_fields(message))


def count_run(executor: Executor, run: Run) -> bool:
    """Record how long the attempt ran and whether it failed (after the time limit step)."""
    assert run.message is not None and run.task is not None and run.attempt is not None
    executor.stats.ran(run.message.queue, run.shown_name, run.attempt.elapsed(), run.error)
    return True


# Steps and helpers of the task records: skip a cancelled message, stop a cancelled
# attempt, and the record write of each outcome.
#
# No step sends a round trip of its own: an outcome's record goes to the acker with its
# ack (`Executor.record`, sent in the same `Broker.settle` batch); a started task's
# "running" record is written by the heartbeat thread within milliseconds of its start,
# for every task started meanwhile in one round trip, and its progress with the heartbeat
# (`worker/keepalive.py`).

NULL_JSON = "null"  # encode_value(None)[0]
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
    return settle_cancelled(executor, run)


def stop_cancelled(executor: Executor, run: Run) -> bool:
    """False after settling an attempt someone cancelled while it ran: not retried,
    what it holds freed, its record "cancelled"."""
    attempt = run.attempt
    if attempt is None or not attempt.cancel_requested:
        return True
    return settle_cancelled(executor, run)


def settle_cancelled(executor: Executor, run: Run) -> bool:
    """A cancelled message settled: what it holds freed, its record "cancelled" (and its
    shard's cancelled mark cleared), its entry acked; False, as a step that settled."""
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
              ("a", str(message.attempt + (0 if final else 1))), ("w", executor.consumer),
              ("d", str(message.dispatched_at_ms))]
    fields += end_fields(run, now_ms) if final else [("ttl", str(ttl))]
    if attempt is not None:  # its start; a retried attempt's trace (the task page's timeline)
        fields.append(("st", str(attempt.started_ms)))
        if not final:
            fields.append(attempt_trace(executor, message.attempt, attempt, status, error,
                                        now_ms))
    if message.dispatch_token is not None:  # a later dispatch of its task_id is not ours
        fields.append(("h", locks.holder_value(message)))
    if status == "succeeded" and attempt is not None:
        if attempt.result is None:  # most tasks: the JSON of None, without building an encoder
            fields.append(("r", NULL_JSON))
        else:
            encoded, why = encode_value(attempt.result, "result")
            fields.append(("r", encoded) if encoded is not None else ("e", why or ""))
    if error is not None:
        fields += error_fields(error, traceback)
    executor.record(RecordWrite(message.id, tuple(fields), ttl if final else PENDING_TTL_S,
                                final=final, uncancel=uncancel, steps=may_have_steps(run),
                                cancel_member=locks.holder_value(message)))
    if message.workflow is not None:  # after its record: the next step reads its result
        note_outcome(executor, run, status)


def error_fields(error: BaseException, traceback: str | None) -> list[tuple[str, str]]:
    """What an attempt that raised writes: the error, its class, the traceback's end."""
    fields = [("e", f"{type(error).__name__}: {error}"),
              ("ec", f"{type(error).__module__}.{type(error).__qualname__}")]
    if traceback:
        fields.append(("tb", traceback[-TRACEBACK_MAX_CHARS:]))
    return fields


def end_fields(run: Run, now_ms: int) -> list[tuple[str, str]]:
    """What a final write adds: the end (`now_ms`), the stream id of the entry it ran
    from ('sid': a move's own write of it, riding the acker's batch, may come after the
    task ended and finds the record final) and the message it ran with ('m', the entry's
    body as read: its message leaves Redis with this ack, and the task page shows its
    payload from here; one over `KEPT_MESSAGE_MAX_BYTES` is left out). The attempt's
    trace is these fields (`core.records.attempt_traces`): no `x:<n>` field for it."""
    fields = [("f", str(now_ms))]
    if run.stream_id:
        fields.append(("sid", run.stream_id))
    body = run.delivery.body
    if body is None and run.message is not None:  # settled by the watchdog (`give_up`)
        try:
            body = run.message.to_json()
        except InvalidTaskPayload:
            body = None
    if body is not None and len(body) <= KEPT_MESSAGE_MAX_BYTES:
        fields.append(("m", body))
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


# Step: turn the entry's body into a usable message, or record it as failed.
#
# Any entry at all ends here as a message whose fields are all usable (a lock it names is
# a unique lock of this shard) or as one failed row, and is acked: nothing an entry holds
# can make it stay pending, run twice or stop the worker.

# Raw bodies kept in a FailedTask row for a message that could not be decoded.
RAW_BODY_LIMIT = 64 * 1024


def decode(executor: Executor, run: Run) -> bool:
    """Set `run.message`; False after acking a deleted entry or recording a bad one."""
    delivery = run.delivery
    if delivery.body is None:  # deleted from the stream while pending
        executor.ack(delivery.shard, delivery.stream_id)
        return False
    try:
        message = TaskMessage.from_json(delivery.body, stream_id=delivery.stream_id)
        message.check_lock_key(executor.broker.prefix, delivery.shard)
    except Exception as exc:  # noqa: BLE001 - bad input is a failed row, never a crash
        undecodable(executor, run, delivery.body, exc)
        return False
    # The stream it was read from is authoritative for the queue; the shard stays on
    # the delivery, where the retry, the ack and the lock release find it.
    message.queue = delivery.queue
    run.message = message
    return True


def undecodable(executor: Executor, run: Run, body: bytes, exc: Exception) -> None:
    """Record an entry that is not a usable message, under a placeholder id, and ack it.

    The row keeps the start of the raw body. Its task name stays empty even when the
    body names one (the error says which): the body is not that task's payload, so the
    admin's retry must not dispatch the task with it.
    """
    if not isinstance(exc, InvalidTaskPayload):
        exc = InvalidTaskPayload(f"message cannot be decoded: {type(exc).__name__}: {exc}")
    raw = body[:RAW_BODY_LIMIT].decode("utf-8", errors="replace").replace("\x00", "\ufffd")
    delivery = run.delivery
    run.message = TaskMessage(id=f"{delivery.stream_id}@{delivery.shard}", task_name="",
                              queue=delivery.queue, payload=None, stream_id=delivery.stream_id)
    executor.record_and_ack(run, exc, attempts=0, payload=raw)


# Step: find the message's task in the registry, or record it as failed (TaskNotFound).

def look_up_task(executor: Executor, run: Run) -> bool:
    """Set `run.task`; False after recording a message no registered task has the name of."""
    assert run.message is not None
    run.task = registry.find(run.message.task_name)
    if run.task is None:
        executor.record_and_ack(run, TaskNotFound(run.message.task_name), attempts=0,
                                event=locks.DROPPED)
        return False
    return True


# Step: a message not started before its `expires` time is recorded as failed, not run.

def check_expiry(executor: Executor, run: Run) -> bool:
    """False after recording (and acking) an expired message."""
    message = run.message
    assert message is not None
    if message.expires_at_ms is None or clock.now_ms() <= message.expires_at_ms:
        return True
    error = TaskExpired(f"task {message.task_name!r} expired before it started")
    executor.record_and_ack(run, error, attempts=message.attempt - 1, event=locks.DROPPED)
    return False


# Step: before re-running a reclaimed message, give it up if its workers died running it
# too often, and make sure it is still ours.
#
# `runs` (the delivery's counter) counts its deliveries that may have started: the first
# one, and each reclaimed run since; all but the first surely died with their worker. Runs
# that died count as failed attempts, so a message that kills every worker running it
# stops after `max_retry + 1` sure deaths: recorded as failed (WorkerLost) and acked.
#
# An entry put back on its stream (a hand-back with no live sibling, a worker stopping with
# it fetched or running) becomes a new entry, delivered once: `put_back()` writes a
# reclaimed one's runs that died into the message's `attempt` first, so none is forgotten
# and the task still gets exactly `max_retry + 1` runs, and marks it `ran_before`, so its
# next run reads the durable steps an earlier run may have kept (core/context.py).

def check_reclaimed(executor: Executor, run: Run) -> bool:
    """False for a reclaimed message given up on, or taken over by another worker."""
    runs = run.delivery.runs
    if runs is None:  # a first delivery
        return True
    message, task = run.message, run.task
    assert message is not None and task is not None
    died = (message.attempt - 1) + (runs - 1)
    if died >= task.options.max_retry + 1:
        executor.record_and_ack(run, WorkerLost(task.name, runs),
                                attempts=message.attempt - 1 + runs, event=locks.FAILED)
        return False
    lost = executor.broker.hold(run.shard, executor.consumer, [run.stream_id], runs=runs + 1)
    return not lost


def put_back(body: bytes | str, runs: int | None) -> bytes | str:
    """The body to requeue an entry with whose delivery counter is `runs`: its `runs - 1`
    runs that died added to its attempt, and marked `ran_before` (it may have run: put
    back while running, or finished with its ack not sent). Unchanged when it cannot be
    read: the worker that reads it records it as bad."""
    try:
        message = TaskMessage.from_json(body)
    except InvalidTaskPayload:
        return body
    died = 0 if runs is None or runs <= 1 else runs - 1
    return replace(message, attempt=message.attempt + died, ran_before=True).to_json()


# Step: a task with a concurrency limit takes a slot, one with a rate limit a start,
# before it runs; one that cannot waits in the delayed set, not failed and not retried.
#
# A task with neither option pays one attribute check. The wait is the acker's requeue
# (`requeue.lua`: the same body into the delayed set at the time to try again, and the
# ack of this entry, in one script), so a crash between the two cannot lose or double
# it; the attempt counter is unchanged (it is the same body). Its record says "delayed",
# with the limit in field `lw` ("rate 5/s") and when it began waiting in `lws`; the record
# script keeps the first `lws` of a wait and, once the task starts, moves the wait into
# `lx:<lws>` (`TaskRecord.limit_waits`, the task page's timeline): no command of its own.
#
# A slot is a lease tied to this attempt (holder: the task id): the heartbeat renews it
# (`Attempt.slots`), the first outcome step frees it with the ack (`free_slots`), and the
# lease runs out within the reservation timeout when the worker dies. The concurrency
# slot is taken before the rate start, so a rate refusal hands the slot back (with the
# requeue) and a concurrency refusal never spends a start.
#
# A limit key Redis refuses to serve (it holds another type, a script error) is no fault
# of the task: the error is logged once per key, and the task waits `BROKEN_KEY_WAIT_MS`
# in the delayed set (reason "<kind> key unusable" in `lw`) and tries again, until the key
# is fixed or deleted. Only the tasks of that key wait; the worker and other keys go on.
# An outage (`REDIS_DOWN`) is not caught here: the entry stays pending, as for any step.


# A task refused a concurrency slot tries again after this, longer the more wait ahead
# of it (one more base per `limit` waiters), at most `SLOT_WAIT_MAX_MS`, plus up to
# `SLOT_JITTER_MS` so waiters spread out.
SLOT_WAIT_BASE_MS = 200
SLOT_WAIT_MAX_MS = 5_000
SLOT_JITTER_MS = 100
# A task whose limit key Redis refuses (wrong type...) tries again after this, plus jitter.
BROKEN_KEY_WAIT_MS = 5_000

# The limit keys whose error was logged: each once, until it serves again.
_broken_keys: set[str] = set()
_broken_lock = threading.Lock()


def check_limits(executor: Executor, run: Run) -> bool:
    """False after putting a task over its limits back to wait (or failing one whose
    key function broke); True, holding its slot and start, when it may run."""
    task = run.task
    assert task is not None
    options = task.options
    if options.rate_limit is None and options.concurrency_limit is None:
        return True
    message = run.message
    assert message is not None
    try:
        concurrency = (None if options.concurrency_limit is None else
                       limit_key_value("concurrency_key", task.name, options.concurrency_key,
                                 message.payload))
        rate = (None if options.rate_limit is None else
                limit_key_value("rate_key", task.name, options.rate_key, message.payload))
    except LimitKeyError as error:
        logger.error("task=%s id=%s: %s; recorded as failed", task.name, message.id, error)
        executor.record_and_ack(run, error, attempts=message.attempt - 1, event=locks.FAILED)
        return False
    store = executor.broker.store.limits
    queue = options.queue or get_settings().DEFAULT_QUEUE
    if concurrency is not None and options.concurrency_limit is not None:
        if not _take_slot(executor, run, store, keys.limit_key(
                store.prefix, queue, "concurrency", task.name, concurrency), concurrency):
            return False
    if rate is not None and options.rate_limit is not None:
        if not _take_rate(executor, run, store, queue, rate):
            return False
    return True


def _take_slot(executor: Executor, run: Run, store: Limits, key: str, value: str) -> bool:
    """A concurrency slot for the run (held in `run.slots`), else the run deferred."""
    task, message = run.task, run.message
    assert task is not None and message is not None
    limit = task.options.concurrency_limit
    assert limit is not None
    timeout_ms = message.reservation_timeout_ms
    lease_ms = (round(executor.reservation_timeout * 1000) if timeout_ms is None
                else timeout_ms)
    take = _guarded(key, lambda: store.take_slot(key, limit, message.id, lease_ms,
                                                 SLOT_WAIT_BASE_MS, SLOT_WAIT_MAX_MS))
    if take is None:
        defer(executor, run, _broken_wait_ms(), "concurrency key unusable")
        return False
    if not take.admitted:
        jitter = random.randint(0, SLOT_JITTER_MS)  # noqa: S311 - spreads waiters
        defer(executor, run, take.wait_ms + jitter, limit_name("concurrency", limit, value))
        return False
    run.slots = (Slot(key, message.id, lease_ms),)
    return True


def _take_rate(executor: Executor, run: Run, store: Limits, queue: str, rate: str) -> bool:
    """A start within the task's rate limit, else the run deferred until one is free."""
    task, message = run.task, run.message
    assert task is not None and message is not None and task.options.rate_limit is not None
    limit = parse_rate(task.options.rate_limit)
    key = keys.limit_key(store.prefix, queue, "rate", task.name, rate)
    take = _guarded(key, lambda: store.take_rate(key, limit.limit, limit.window_ms,
                                                 message.id))
    if take is None:
        defer(executor, run, _broken_wait_ms(), "rate key unusable")
        return False
    if not take.admitted:
        defer(executor, run, take.wait_ms, limit_name("rate", task.options.rate_limit, rate))
        return False
    return True


def limit_name(kind: str, limit: object, key: str) -> str:
    """Which limit a task waits on, for people: "rate 5/s", "concurrency 2 (key acme)"."""
    return f"{kind} {limit}" + (f" (key {key})" if key else "")


def _guarded(key: str, take: Callable[[], Take]) -> Take | None:
    """`take()`, or None (logged once per key) when Redis refuses the key itself."""
    try:
        result = take()
    except REDIS_DOWN:
        raise
    except REDIS_ERROR as error:
        with _broken_lock:
            first = key not in _broken_keys
            _broken_keys.add(key)
        if first:
            logger.error("limit key %s cannot be used (%s); its tasks wait and try again "
                         "every %d ms until it is fixed or deleted", key, error,
                         BROKEN_KEY_WAIT_MS)
        return None
    if _broken_keys and key in _broken_keys:
        with _broken_lock:
            _broken_keys.discard(key)
        logger.warning("limit key %s works again", key)
    return result


def _broken_wait_ms() -> int:
    return BROKEN_KEY_WAIT_MS + random.randint(0, SLOT_JITTER_MS)  # noqa: S311 - spreads


def free_slots(executor: Executor, run: Run) -> bool:
    """The first outcome step: the attempt ended, so its slots go back (with its ack)."""
    attempt = run.attempt
    slots = attempt.slots if attempt is not None else run.slots
    if slots:
        if attempt is not None:
            attempt.slots = ()
        run.slots = ()
        executor.free_slots(slots)
    return True


def defer(executor: Executor, run: Run, wait_ms: int, reason: str) -> None:
    """Put the delivery back, unchanged, into the delayed set for `wait_ms`: its ack and
    the new entry in one script, with a "delayed" record, and any slot taken handed back."""
    message = run.message
    assert message is not None and run.delivery.body is not None
    if run.slots:
        executor.free_slots(run.slots)
        run.slots = ()
    now_ms = clock.now_ms()
    due_ms = now_ms + max(1, wait_ms)
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("task=%s id=%s is over its %s limit; waiting %d ms", message.task_name,
                     message.id, reason, wait_ms)
    ttl = record_ttl(executor, run)
    if ttl > 0 and message.task_name:
        fields = [("s", "delayed"), ("t", message.task_name), ("q", message.queue),
                  ("a", str(message.attempt)), ("w", ""), ("d", str(message.dispatched_at_ms)),
                  ("due", str(due_ms)), ("lw", reason), ("lws", str(now_ms)),
                  ("ttl", str(ttl))]
        if message.dispatch_token is not None:
            fields.append(("h", locks.holder_value(message)))
        executor.record(RecordWrite(message.id, tuple(fields),
                                    PENDING_TTL_S + wait_ms // 1000 + 1,
                                    steps=may_have_steps(run)))
    executor.requeue(run.shard, run.stream_id, run.delivery.body, due_ms)


# Step: an attempt that ran past its task's `time_limit` failed, whatever it returned
# (also one the watchdog gave up on, which returned nothing).

def time_limit_error(attempt: Attempt, cause: BaseException | None = None) -> TimeLimitExceeded:
    error = TimeLimitExceeded(attempt.task.name, attempt.time_limit or 0, attempt.elapsed())
    error.__cause__ = cause
    return error


def check_time_limit(executor: Executor, run: Run) -> bool:
    """Turn the outcome of an attempt over its limit into `TimeLimitExceeded`."""
    attempt = run.attempt
    if attempt is not None and attempt.over_time_limit():
        run.error = time_limit_error(attempt, cause=run.error)
    return True


# Step: a failed attempt with retries left goes back, as the next attempt, through the acker.
#
# A retry with a backoff waits in the delayed set, holding no worker thread; the scheduler
# moves it back onto the stream when it falls due. So does a fair task's retry without
# one, due at once: it joins the end of its key's turn (docs/flow-control.md). The
# requeue also acks this entry (one atomic script, sent in the acker's batch).



def retry_delay(task: Task, retry: int) -> float:
    """Seconds before retry number `retry`, from the task's `retry_backoff`."""
    backoff = task.options.retry_backoff
    if backoff is None:
        return default_backoff(retry)
    if callable(backoff):
        seconds = float(backoff(retry))
        if not math.isfinite(seconds):  # inf * 1000 cannot be a due time: no retry at all
            logger.warning("retry_backoff of task %s returned %r; using the default backoff",
                           task.name, seconds)
            return default_backoff(retry)
        return min(max(0.0, seconds), float(MAX_SECONDS))
    return float(backoff)


def retry_due_ms(delay: float, takes_turn: bool = False) -> int:
    """When the retry may run: 0 puts it straight back on the stream. One that
    `takes_turn` (a fair key, or a fair queue) goes to the delayed set even without a
    backoff, due now: its promotion puts it at the end of its key's turn."""
    if delay > 0:
        return clock.now_ms() + round(delay * 1000)
    return clock.now_ms() if takes_turn else 0


def _fair_queue(executor: Executor, shard: str) -> bool:
    """Whether `shard` is a fair queue; not, when Redis cannot say (the requeue that
    follows is retried by the acker as any other)."""
    try:
        return fair_queue(executor.broker, shard)
    except REDIS_DOWN:
        return False


def retry(executor: Executor, run: Run) -> bool:
    """False after queuing the next attempt of a failed one that has retries left."""
    message, task, error = run.message, run.task, run.error
    assert message is not None and task is not None
    if error is None or message.attempt > task.options.max_retry:
        return True
    delay = retry_delay(task, message.attempt)
    logger.warning("task=%s id=%s queue=%s attempt=%d raised %s: %s; retry %d of %d in "
                   "%.2fs", run.shown_name, message.id, message.queue, message.attempt,
                   type(error).__name__, error, message.attempt, task.options.max_retry,
                   delay, extra=log_fields(message))
    next_attempt = replace(message, attempt=message.attempt + 1, stream_id=None)
    write_outcome(executor, run, "retrying", error=error)
    takes_turn = delay <= 0 and (message.fair_key is not None
                                 or _fair_queue(executor, run.shard))
    executor.requeue(run.shard, run.stream_id, next_attempt.to_json(),
                     retry_due_ms(delay, takes_turn))
    executor.stats.retried(message.queue, run.shown_name)
    finished(run, RETRIED, delay=delay)
    return False


# Steps: the last ones. A failed attempt with no retry left is recorded for good; a
# successful one frees its lock. Both are then acked through the acker.

def fail_for_good(executor: Executor, run: Run) -> bool:
    """False after writing the FailedTask row of an attempt that failed for good."""
    if run.error is None:
        return True
    assert run.message is not None
    executor.record_and_ack(run, run.error, attempts=run.message.attempt,
                            event=locks.FAILED, task_raised=True)
    finished(run, FAILED)
    return False


def succeed(executor: Executor, run: Run) -> bool:
    """Free what the message holds at success, record it (with its result), ack it,
    count it."""
    assert run.message is not None and run.task is not None
    release_locks(executor, run, locks.SUCCEEDED)
    write_outcome(executor, run, "succeeded")
    executor.ack(run.shard, run.stream_id)
    executor.stats.succeeded(run.message.queue, run.shown_name)
    finished(run, SUCCEEDED)
    return False
