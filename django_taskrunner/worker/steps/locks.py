"""Step: free an `until_executing` lock (and renew a task_id) as the task starts.

The other releases happen where the outcome is settled (success, failure, drop), through
`release_locks()`; retries free nothing: the lock and the task_id are kept across them.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from django_taskrunner.core import unique as locks
from django_taskrunner.worker.steps.run import Run

if TYPE_CHECKING:
    from django_taskrunner.worker.executor import Executor

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
