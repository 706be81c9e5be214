"""Step: before re-running a reclaimed message, give it up if its workers died running it
too often, and make sure it is still ours.

`runs` (the delivery's counter) counts its deliveries that may have started: the first
one, and each reclaimed run since; all but the first surely died with their worker. Runs
that died count as failed attempts, so a message that kills every worker running it
stops after `max_retry + 1` sure deaths: recorded as failed (WorkerLost) and acked.

A reclaimed entry put back on its stream without being run (a hand-back with no live
sibling, a worker stopping with it still buffered) becomes a new entry, delivered once:
`carry_deaths()` writes its runs that died into the message's `attempt` first, so none
is forgotten and the task still gets exactly `max_retry + 1` runs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from django_taskrunner.core import unique as locks
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.exceptions import InvalidTaskPayload, WorkerLost
from django_taskrunner.worker.steps.run import Run

if TYPE_CHECKING:
    from django_taskrunner.worker.executor import Executor


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


def carry_deaths(body: bytes | str, runs: int | None) -> bytes | str:
    """The body to requeue an entry with, unstarted, whose delivery counter is `runs`:
    its `runs - 1` runs that died added to its attempt. Unchanged for a first delivery
    (or a body that cannot be read: the worker that reads it records it as bad)."""
    if runs is None or runs <= 1:
        return body
    try:
        message = TaskMessage.from_json(body)
    except InvalidTaskPayload:
        return body
    return replace(message, attempt=message.attempt + runs - 1).to_json()
