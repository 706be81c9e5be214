"""Step: a failed attempt with retries left goes back, as the next attempt, through the acker.

A retry with a backoff waits in the delayed set, holding no worker thread; the scheduler
moves it back onto the stream when it falls due. The requeue also acks this entry (one
atomic script, sent in the acker's batch).
"""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from typing import TYPE_CHECKING

from django_taskrunner.bounds import MAX_SECONDS
from django_taskrunner.core import clock
from django_taskrunner.core.task import Task
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


def retry_due_ms(delay: float) -> int:
    """When the retry may run: 0 puts it straight back on the stream."""
    return clock.now_ms() + round(delay * 1000) if delay > 0 else 0


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
    executor.requeue(run.shard, run.stream_id, next_attempt.to_json(), retry_due_ms(delay))
    executor.stats.retried(message.queue, run.shown_name)
    finished(run, RETRIED, delay=delay)
    return False
