"""Step: a failed attempt with retries left goes back, as the next attempt, through the acker.

A retry with a backoff waits in the delayed set, holding no worker thread; the scheduler
moves it back onto the stream when it falls due. So does a fair task's retry without
one, due at once: it joins the end of its key's turn (docs/flow-control.md). The
requeue also acks this entry (one atomic script, sent in the acker's batch).
"""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from typing import TYPE_CHECKING

from django_taskrunner.conf import MAX_SECONDS
from django_taskrunner.core import clock
from django_taskrunner.core.sending import fair_queue
from django_taskrunner.core.task import Task
from django_taskrunner.store.errors import REDIS_DOWN
from django_taskrunner.worker.backoff import default_backoff
from django_taskrunner.worker.steps.observe import RETRIED, finished, log_fields
from django_taskrunner.worker.steps.record import write_outcome
from django_taskrunner.worker.steps.run import Run

if TYPE_CHECKING:
    from django_taskrunner.worker.executor import Executor

logger = logging.getLogger(__name__)


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
