"""Steps: the last ones. A failed attempt with no retry left is recorded for good; a
successful one frees its lock. Both are then acked through the acker."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django_taskrunner.core import unique as locks
from django_taskrunner.worker.steps.locks import release_locks
from django_taskrunner.worker.steps.observe import FAILED, SUCCEEDED, finished
from django_taskrunner.worker.steps.record import write_outcome
from django_taskrunner.worker.steps.run import Run

if TYPE_CHECKING:
    from django_taskrunner.worker.executor import Executor


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
