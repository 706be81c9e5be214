"""Running one message: small steps, called in order, each with one job.

decode -> look up the task -> check expiry -> (a reclaimed message: give up if its
worker died running it too often) -> start (free an `until_executing` lock) -> run
(with Django's connection hygiene and the task's time limit) -> on success free the
lock and ack; on failure retry (keeping the lock) or record the failure, free per
mode, then ack.

`Executor.handle()` never raises: a bad message becomes a `FailedTask` row and the
worker goes on. If even recording fails (the database is down), the message stays
un-acked, so it is delivered again later instead of being lost.
"""

from __future__ import annotations

import logging
import math
import traceback as tb
from collections.abc import Callable
from dataclasses import replace

from django.db import close_old_connections

from django_taskrunner.checks import MAX_SECONDS
from django_taskrunner.core import clock
from django_taskrunner.core import unique as locks
from django_taskrunner.core.context import TaskContext
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.core.registry import registry
from django_taskrunner.core.task import Task
from django_taskrunner.exceptions import (
    InvalidTaskPayload,
    TaskNotFound,
    TaskRunnerError,
    TimeLimitExceeded,
    WorkerLost,
)
from django_taskrunner.stats.recorder import StatsRecorder
from django_taskrunner.store.broker import Broker
from django_taskrunner.worker.backoff import default_backoff
from django_taskrunner.worker.delivery import Delivery
from django_taskrunner.worker.failures import record_failure
from django_taskrunner.worker.running import Attempt, RunningSet

logger = logging.getLogger(__name__)

# Raw bodies kept in a FailedTask row for a message that could not be decoded.
RAW_BODY_LIMIT = 64 * 1024


class TaskExpired(TaskRunnerError):
    """The task was not started before its `expires` time."""


class AttemptAbandoned(TaskRunnerError):
    """The time-limit watchdog settled this attempt already; its result is ignored."""


ABANDONED = AttemptAbandoned()


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


class Executor:
    """Runs messages of one worker. Each ends in exactly one call: `ack(shard, stream_id)`
    or, for a retry, `requeue(shard, stream_id, body, due_ms)` (the worker's acker, which
    sends both in batches; without `requeue`, the broker's own, at once)."""

    def __init__(
        self, broker: Broker, consumer: str, ack: Callable[[str, str], None],
        stats: StatsRecorder | None = None,
        running: RunningSet | None = None, reservation_timeout: float = 300.0,
        requeue: Callable[[str, str, str, int], None] | None = None,
    ) -> None:
        self.broker = broker
        self.consumer = consumer
        self.ack = ack
        self.requeue = requeue if requeue is not None else self._requeue_now
        # Run times and outcomes, in memory; the worker's monitor writes them in batches.
        self.stats = stats if stats is not None else StatsRecorder()
        self.running = running if running is not None else RunningSet()
        self.reservation_timeout = reservation_timeout

    def handle(self, delivery: Delivery) -> None:
        """Process one stream entry to the end; never raises."""
        try:
            self._handle(delivery)
        except Exception:
            logger.exception("could not finish message %s of queue %s; it stays pending",
                             delivery.stream_id, delivery.shard)

    def _handle(self, delivery: Delivery) -> None:
        if delivery.body is None:  # deleted from the stream while pending
            self.ack(delivery.shard, delivery.stream_id)
            return
        message = self.decode(delivery, delivery.body)
        if message is None:
            return
        task = self.lookup(delivery, message)
        if task is None:
            return
        if self.expired(delivery, message):
            return
        if delivery.runs is not None and not self.restart(delivery, task, message):
            return
        self.stats.picked_up(message.queue, task.name, delivery.stream_id, delivery.runs)
        self.release(delivery, message, locks.STARTED)
        started = clock.monotonic()
        error = self.run(delivery, task, message)
        if error is ABANDONED:
            return
        self.stats.ran(message.queue, task.name, clock.monotonic() - started, error)
        if error is None:
            self.succeeded(delivery, task, message)
        else:
            self.failed(delivery, task, message, error)

    def failed(
        self, delivery: Delivery, task: Task, message: TaskMessage, error: BaseException
    ) -> None:
        """An attempt failed: retry it, or record the task as failed for good."""
        if message.attempt <= task.options.max_retry:
            self.retry(delivery, task, message, error)
        else:
            self.failed_for_good(delivery, message, error)

    def decode(self, delivery: Delivery, body: bytes) -> TaskMessage | None:
        """The message, or None after recording an entry that cannot be used as failed.

        Any entry at all ends here as a message whose fields are all usable (a lock it
        names is a unique lock of this queue) or as one failed row, and is acked: nothing
        an entry holds can make it stay pending, run twice or stop the worker.
        """
        try:
            message = TaskMessage.from_json(body, stream_id=delivery.stream_id)
            message.check_lock_key(self.broker.prefix, delivery.shard)
        except Exception as exc:  # noqa: BLE001 - bad input is a failed row, never a crash
            self.undecodable(delivery, body, exc)
            return None
        # The stream it was read from is authoritative for the queue; the shard stays
        # on the delivery, where the retry, the ack and the lock release find it.
        message.queue = delivery.queue
        return message

    def undecodable(self, delivery: Delivery, body: bytes, exc: Exception) -> None:
        """Record an entry that is not a usable message, under a placeholder id, and ack it.

        The row keeps the start of the raw body. Its task name stays empty even when the
        body names one (the error says which): the body is not that task's payload, so
        the admin's retry must not dispatch the task with it.
        """
        if not isinstance(exc, InvalidTaskPayload):
            exc = InvalidTaskPayload(f"message cannot be decoded: {type(exc).__name__}: {exc}")
        raw = body[:RAW_BODY_LIMIT].decode("utf-8", errors="replace").replace("\x00", "\ufffd")
        placeholder = TaskMessage(id=f"{delivery.stream_id}@{delivery.shard}", task_name="",
                                  queue=delivery.queue, payload=None,
                                  stream_id=delivery.stream_id)
        self._record_and_ack(delivery, placeholder, exc, attempts=0, payload=raw)

    def lookup(self, delivery: Delivery, message: TaskMessage) -> Task | None:
        task = registry.find(message.task_name)
        if task is None:
            self._record_and_ack(delivery, message, TaskNotFound(message.task_name),
                                 attempts=0, event=locks.DROPPED)
        return task

    def expired(self, delivery: Delivery, message: TaskMessage) -> bool:
        """Record and ack a message that was not started before its expiry time."""
        if message.expires_at_ms is None or clock.now_ms() <= message.expires_at_ms:
            return False
        error = TaskExpired(f"task {message.task_name!r} expired before it started")
        self._record_and_ack(delivery, message, error, attempts=message.attempt - 1,
                             event=locks.DROPPED)
        return True

    def restart(self, delivery: Delivery, task: Task, message: TaskMessage) -> bool:
        """Before re-running a reclaimed message: False if it is given up or no longer ours.

        `runs` counts its deliveries that may have started (the first one, and each
        reclaimed run since); all but the first surely died with their worker. Runs that
        died count as failed attempts, so a message that kills every worker running it
        stops after `max_retry + 1` sure deaths: recorded as failed and acked.
        """
        runs = delivery.runs or 1
        died = (message.attempt - 1) + (runs - 1)
        if died >= task.options.max_retry + 1:
            self._record_and_ack(delivery, message, WorkerLost(task.name, runs),
                                 attempts=message.attempt - 1 + runs, event=locks.FAILED)
            return False
        lost = self.broker.hold(delivery.shard, self.consumer, [delivery.stream_id],
                                runs=runs + 1)
        return not lost

    def run(self, delivery: Delivery, task: Task, message: TaskMessage) -> BaseException | None:
        """Call the task function; return what it raised, None on success, or ABANDONED."""
        logger.debug("running task=%s id=%s queue=%s attempt=%d", task.name, message.id,
                     message.queue, message.attempt)
        timeout = message.reservation_timeout_ms
        attempt = self.running.start(
            task, message, self.reservation_timeout if timeout is None else timeout / 1000,
            delivery.shard)
        try:
            error = self.call(task, message, attempt)
        finally:
            settled = self.running.settle(attempt)
        if not settled:
            return ABANDONED
        if attempt.over_time_limit():
            return self.time_limit_error(attempt, cause=error)
        return error

    def call(self, task: Task, message: TaskMessage, attempt: Attempt) -> BaseException | None:
        close_old_connections()
        try:
            if task.options.takes_context:
                task.fn(self.context(message, attempt), message.payload)
            else:
                task.fn(message.payload)
        except BaseException as exc:  # noqa: BLE001 - a task's SystemExit must not stop us
            return exc
        finally:
            close_old_connections()
        return None

    def time_limit_error(
        self, attempt: Attempt, cause: BaseException | None = None
    ) -> TimeLimitExceeded:
        error = TimeLimitExceeded(attempt.task.name, attempt.time_limit or 0, attempt.elapsed())
        error.__cause__ = cause
        return error

    def give_up(self, attempt: Attempt) -> None:
        """The watchdog settled an attempt stuck past its time limit: fail it like any other."""
        error = self.time_limit_error(attempt)
        self.stats.ran(attempt.queue, attempt.task.name, clock.monotonic() - attempt.started,
                       error)
        delivery = Delivery(attempt.shard, attempt.stream_id, None)
        self.failed(delivery, attempt.task, attempt.message, error)

    def context(self, message: TaskMessage, attempt: Attempt) -> TaskContext:
        def heartbeat() -> bool:
            return self.broker.heartbeat(attempt.shard, self.consumer, attempt.stream_id)

        return TaskContext(
            id=message.id, task_name=message.task_name, queue=message.queue,
            attempt=message.attempt, _heartbeat=heartbeat, _cancel=attempt.cancel,
        )

    def release(self, delivery: Delivery, message: TaskMessage, event: str) -> None:
        """Free (or renew) the unique lock and task_id the message holds, per its mode.

        Retries call nothing here: the lock and the task_id are kept across retries.
        """
        if message.lock_key is None and not message.has_task_id:
            return
        try:
            # The lock and task_id live in the shard's slot: core.unique finds their keys
            # by the message's queue, so it gets a copy naming the shard.
            stored = message if delivery.shard == message.queue else replace(
                message, queue=delivery.shard)
            locks.release(self.broker.client, self.broker.prefix, stored, event)
        except Exception:
            # Never let a release undo the outcome: an entry left pending would run again.
            logger.exception("task=%s id=%s: could not free its unique lock or task id at "
                             "%s; it frees at its TTL", message.task_name, message.id, event)

    def succeeded(self, delivery: Delivery, task: Task, message: TaskMessage) -> None:
        self.release(delivery, message, locks.SUCCEEDED)
        self.ack(delivery.shard, delivery.stream_id)
        self.stats.succeeded(message.queue, task.name)

    def retry(
        self, delivery: Delivery, task: Task, message: TaskMessage, error: BaseException
    ) -> None:
        """Queue the next attempt and ack this one (one atomic script, sent by the acker)."""
        delay = retry_delay(task, message.attempt)
        logger.warning("task=%s id=%s attempt=%d raised %s: %s; retry %d of %d in %.2fs",
                       task.name, message.id, message.attempt, type(error).__name__, error,
                       message.attempt, task.options.max_retry, delay)
        next_attempt = replace(message, attempt=message.attempt + 1, stream_id=None)
        due_ms = self.retry_due_ms(delay)
        self.requeue(delivery.shard, delivery.stream_id, next_attempt.to_json(), due_ms)
        self.stats.retried(message.queue, task.name)

    def _requeue_now(self, shard: str, stream_id: str, body: str, due_ms: int) -> None:
        self.broker.requeue(shard, self.consumer, stream_id, body, due_ms)

    def retry_due_ms(self, delay: float) -> int:
        """When the retry may run: 0 puts it straight back on the stream.

        A retry with a backoff waits in the delayed set, holding no worker thread; the
        scheduler moves it back onto the stream when it falls due.
        """
        return clock.now_ms() + round(delay * 1000) if delay > 0 else 0

    def failed_for_good(
        self, delivery: Delivery, message: TaskMessage, error: BaseException
    ) -> None:
        self._record_and_ack(delivery, message, error, attempts=message.attempt,
                             event=locks.FAILED, task_raised=True)

    def _record_and_ack(
        self, delivery: Delivery, message: TaskMessage, error: BaseException, *, attempts: int,
        payload: str | None = None, event: str | None = None, task_raised: bool = False,
    ) -> None:
        """Write the failure, then free what the message holds at `event`, then ack.

        `task_raised`: `error` is what the task's last attempt raised (the handler gets
        it wrapped in a `TaskExecutionError`).

        When the record cannot be written the message stays pending, and so does its lock.
        """
        close_old_connections()
        try:
            record_failure(message, error, attempts=attempts, worker=self.consumer,
                           traceback="".join(tb.format_exception(error)), payload=payload,
                           task_raised=task_raised)
        finally:
            close_old_connections()
        if event is not None:
            self.release(delivery, message, event)
        self.ack(delivery.shard, delivery.stream_id)
        self.stats.failed(message.queue, message.task_name)

