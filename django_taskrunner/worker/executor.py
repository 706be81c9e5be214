"""Running one delivery: the policies as small steps (worker/steps.py), called in order,
inside Django's connection hygiene (below).

    BEFORE_RUN: decode -> look up the task -> expiry -> (a reclaimed message: give up if
                its workers died running it too often) -> limits (a concurrency slot,
                a rate start; a task over a limit waits in the delayed set) -> start
                (free an `until_executing` lock)
    run the function (Django's connection hygiene; the watchdog enforces time limits),
                or hand an `async def` task to the event loop (`async_runner.py`), which
                awaits it and then calls the AFTER_RUN steps itself
    AFTER_RUN:  free the slots -> time limit -> count the run -> retry (keeping the
                lock) -> record the failure for good -> success (free the lock)

Each step returns True to go on, or False once it settled the delivery: acked, requeued
or recorded. Every delivery ends in exactly one `ack()` or `requeue()`, both the acker's.

`Executor.handle()` never raises: a bad message becomes a `FailedTask` row and the
worker goes on. A row the database refuses (it is down) is kept in Redis and written
later (`failures.py`); if Redis refuses it too, the message stays un-acked, so it is
delivered again later instead of being lost.
"""

from __future__ import annotations

import logging
import threading
import traceback as tb
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from django.db import close_old_connections, connections
from django.db.backends.signals import connection_created

from django_taskrunner.conf import get_settings
from django_taskrunner.core.awaitables import returned_awaitable, run_to_end
from django_taskrunner.core.context import TaskContext, first_run, stored_steps
from django_taskrunner.core.records import PENDING_TTL_S, encode_value, entry_record
from django_taskrunner.exceptions import TaskExpired, TaskRunnerError
from django_taskrunner.stats.recorder import StatsRecorder
from django_taskrunner.store.limits import Slot
from django_taskrunner.store.records import RecordWrite
from django_taskrunner.store.streams import Broker
from django_taskrunner.store.workflows import MemberDone
from django_taskrunner.worker.cancels import CancelBook
from django_taskrunner.worker.failures import record_failure
from django_taskrunner.worker.fetcher import Delivery
from django_taskrunner.worker.interrupt import entering, leaving
from django_taskrunner.worker.running import Attempt, RunningSet
from django_taskrunner.worker.steps import (
    Run,
    announce_start,
    check_expiry,
    check_limits,
    check_reclaimed,
    check_time_limit,
    count_run,
    decode,
    fail_for_good,
    free_slots,
    look_up_task,
    parent_reader,
    record_ttl,
    release_locks,
    release_on_start,
    retry,
    skip_cancelled,
    stop_cancelled,
    succeed,
    write_outcome,
)

if TYPE_CHECKING:
    from django_taskrunner.worker.async_runner import AsyncRunner


logger = logging.getLogger(__name__)


def set_progress(attempt: Attempt, value: Any) -> None:
    """`ctx.set_progress`: keep the JSON of `value` for the heartbeat, or refuse it."""
    encoded, why = encode_value(value, "progress")
    if encoded is None:
        raise ValueError(why)
    attempt.set_progress(encoded)

__all__ = ["Executor"]

Step = Callable[["Executor", Run], bool]

# The order of the policies. A new one (a rate limit, a cancellation) is one line here.
BEFORE_RUN: Sequence[Step] = (decode, skip_cancelled, look_up_task, check_expiry, check_reclaimed,
                              check_limits, release_on_start, announce_start)
AFTER_RUN: Sequence[Step] = (free_slots, check_time_limit, count_run, stop_cancelled, retry,
                             fail_for_good, succeed)


class AttemptAbandoned(TaskRunnerError):
    """The time-limit watchdog settled this attempt already; its result is ignored."""


ABANDONED = AttemptAbandoned()


class Executor:
    """Runs messages of one worker. Each ends in exactly one call: `ack(shard, stream_id)`
    or, for a retry, `requeue(shard, stream_id, body, due_ms)` (the worker's acker, which
    sends both in batches; without `requeue`, the broker's own, at once)."""

    def __init__(
        self, broker: Broker, consumer: str, ack: Callable[[str, str], None],
        stats: StatsRecorder | None = None,
        running: RunningSet | None = None, reservation_timeout: float = 300.0,
        requeue: Callable[[str, str, str, int], None] | None = None,
        record: Callable[[RecordWrite], None] | None = None, result_ttl: int | None = None,
        workflow: Callable[[MemberDone], None] | None = None,
    ) -> None:
        self.broker = broker
        self.consumer = consumer
        self.ack = ack
        self.requeue = requeue if requeue is not None else self._requeue_now
        # Run times and outcomes, in memory; the worker's monitor writes them in batches.
        self.stats = stats if stats is not None else StatsRecorder()
        self.running = running if running is not None else RunningSet()
        self.reservation_timeout = reservation_timeout
        # Task records: each outcome's write goes with its ack (the acker's batch); the
        # ids each stream's last fetch found cancelled; the RESULT_TTL of the worker.
        self.record = record if record is not None else self._record_now
        self.cancelled: dict[str, set[str]] = {}
        # The cancels heard on pub/sub, and the skip decisions they must not cross.
        self.cancels = CancelBook(self.running)
        self.result_ttl = get_settings().RESULT_TTL if result_ttl is None else result_ttl
        # The worker's event loop for `async def` tasks; without one (an executor used on
        # its own) a coroutine is run to completion on the calling thread.
        self.coroutines: AsyncRunner | None = None
        # Workflow members' completions: with the ack, in the acker's batch.
        self.workflow = workflow if workflow is not None else self._workflow_now
        # Frees the concurrency slots of an attempt that ended: the worker's acker sends
        # it with the ack; without one, at once.
        self.free_slots: Callable[[tuple[Slot, ...]], None] = self._free_slots_now

    def handle(self, delivery: Delivery) -> bool:
        """Process one stream entry to the end; never raises. False when an `async def`
        task went on to the event loop, which settles it later."""
        run = Run(delivery)
        try:
            self._handle(run)
        except Exception:
            logger.exception("could not finish message %s of queue %s; it stays pending",
                             delivery.stream_id, delivery.shard)
        if not run.on_loop:  # one on the event loop is forgotten when it ends there
            self.cancels.finished(delivery.shard, delivery.stream_id)
        return not run.on_loop

    def _handle(self, run: Run) -> None:
        for step in BEFORE_RUN:
            if not step(self, run):
                return
        assert run.task is not None
        if run.task.is_async and self.coroutines is not None:
            self.coroutines.submit(run)
            run.on_loop = True
            return
        run.error = self.run(run)
        if run.error is not ABANDONED:
            self.settle(run)

    def settle(self, run: Run) -> None:
        """The outcome steps, in order, until one settles the delivery."""
        for step in AFTER_RUN:
            if not step(self, run):
                return

    def run(self, run: Run) -> BaseException | None:
        """Call the task function; return what it raised, None on success, or ABANDONED."""
        attempt = self.begin(run)
        try:
            error = self.call(attempt)
        finally:
            settled = self.running.settle(attempt)
        return error if settled else ABANDONED

    def _record_now(self, write: RecordWrite) -> None:
        self.broker.records.write([write])

    def _workflow_now(self, done: MemberDone) -> None:
        self.broker.store.workflows.member_done(done)

    def _free_slots_now(self, slots: tuple[Slot, ...]) -> None:
        self.broker.store.limits.release(slots)

    def begin(self, run: Run) -> Attempt:
        """Register the attempt about to run (on this thread, or on the event loop)."""
        task, message = run.task, run.message
        assert task is not None and message is not None
        if logger.isEnabledFor(logging.DEBUG):  # spares building the arguments of every run
            logger.debug("running task=%s id=%s queue=%s attempt=%d", task.name, message.id,
                         message.queue, message.attempt)
        timeout = message.reservation_timeout_ms
        run.attempt = self.running.start(
            task, message, self.reservation_timeout if timeout is None else timeout / 1000,
            run.shard, record_ttl=record_ttl(self, run),
            coroutine=task.is_async and self.coroutines is not None,
            first_run=task.options.takes_context and first_run(message, run.delivery.runs))
        run.attempt.slots = run.slots
        self.cancels.started(run.attempt)
        return run.attempt

    def end(self, run: Run, error: BaseException | None) -> None:
        """An attempt awaited on the event loop ended: settle it, unless the watchdog did."""
        assert run.attempt is not None
        if self.running.settle(run.attempt):
            run.error = error
            self.settle(run)

    def call(self, attempt: Attempt) -> BaseException | None:
        """Run the attempt on this thread (an `async def` task to completion on a loop of
        its own); return what it raised, or None."""
        task = attempt.task
        check_connections()  # Django's close_old_connections(), cheaper (below)
        try:
            entering(attempt)  # from here to `leaving`, a terminate may interrupt it
            try:
                result = self.invoke(attempt)
                if task.is_async:
                    result = run_to_end(result)
            finally:
                leaving(attempt)
            attempt.result = result
            if result is not None and not task.is_async:  # most return None: no check then
                return returned_awaitable(task.name, result)
        except BaseException as exc:  # noqa: BLE001 - a task's SystemExit must not stop us
            return exc
        finally:
            check_connections()
        return None

    def invoke(self, attempt: Attempt) -> Any:
        """Call the task function with its payload (and context): its result, or for an
        `async def` task its coroutine, not yet awaited."""
        task, message = attempt.task, attempt.message
        if task.options.takes_context:
            return task.fn(self.context(attempt), message.payload)
        return task.fn(message.payload)

    def give_up(self, attempt: Attempt) -> None:
        """The watchdog settled an attempt stuck past its time limit: fail it like any other."""
        self.settle(Run(Delivery(attempt.shard, attempt.stream_id, None), attempt.message,
                        attempt.task, attempt))

    def context(self, attempt: Attempt) -> TaskContext:
        message = attempt.message

        def heartbeat() -> bool:
            return self.broker.heartbeat(attempt.shard, self.consumer, attempt.stream_id)

        return TaskContext(
            id=message.id, task_name=message.task_name, queue=message.queue,
            attempt=message.attempt, _heartbeat=heartbeat, _cancel=attempt.cancel,
            _progress=lambda value: set_progress(attempt, value),
            _parent=parent_reader(self, message),
            _steps=stored_steps(self.broker.store, message.id, message.task_name,
                                PENDING_TTL_S, first_run=attempt.first_run,
                                on_keep=attempt.steps_kept),
        )

    def _requeue_now(self, shard: str, stream_id: str, body: str, due_ms: int) -> None:
        self.broker.requeue(shard, self.consumer, stream_id, body, due_ms,
                            entry_record(body, shard, due_ms or None))

    def record_and_ack(
        self, run: Run, error: BaseException, *, attempts: int,
        payload: str | None = None, event: str | None = None, task_raised: bool = False,
    ) -> None:
        """Write the failure, then free what the message holds at `event`, then ack.

        `task_raised`: `error` is what the task's last attempt raised (the handler gets
        it wrapped in a `TaskExecutionError`).

        When the row can be neither written nor kept in Redis the message stays pending,
        and so does its lock.
        """
        message = run.message
        assert message is not None
        close_old_connections()
        trace = "".join(tb.format_exception(error))
        try:
            record_failure(message, error, attempts=attempts, worker=self.consumer,
                           traceback=trace, payload=payload, task_raised=task_raised)
        finally:
            close_old_connections()
        if event is not None:
            release_locks(self, run, event)
        write_outcome(self, run, "expired" if isinstance(error, TaskExpired) else "failed",
                      error=error, traceback=trace)
        self.ack(run.shard, run.stream_id)
        self.stats.failed(message.queue, run.shown_name)


# Django's connection hygiene around each task, as `close_old_connections()` does it,
# without walking every database alias twice per task.
#
# Django's request cycle calls `close_old_connections()` at the start and the end of each
# request; the executor does so around each task: a connection past its `CONN_MAX_AGE`,
# left in a transaction state it should not be in, or broken by an error is closed, so the
# next query opens a fresh one. `close_old_connections()` finds this thread's connections
# through `connections.all(initialized_only=True)`, which looks each alias up in Django's
# thread-local storage: about a tenth of the executor's own work per task.
#
# Here each thread keeps the list that look-up returned (the first check on the thread
# makes it) and checks each connection of it with `close_if_unusable_or_obsolete()`, the
# very check `close_old_connections()` makes, until Django opens a connection on the thread
# (`connection_created`): only then can a connection exist that the list does not hold, so
# the next check looks them up again. With `CONN_MAX_AGE` 0 every task opens one, and each
# check looks up, as before; a thread that has no connection checks an empty list.

_local = threading.local()


def _opened(sender: Any, connection: Any, **kwargs: Any) -> None:
    """A connection was opened on this thread: look the connections up at the next check."""
    _local.known = None


connection_created.connect(_opened, weak=False, dispatch_uid="django_taskrunner.connections")


def check_connections() -> None:
    """Close this thread's database connections that are unusable or past their age."""
    known = getattr(_local, "known", None)
    if known is None:
        known = _local.known = connections.all(initialized_only=True)
    for connection in known:
        connection.close_if_unusable_or_obsolete()
