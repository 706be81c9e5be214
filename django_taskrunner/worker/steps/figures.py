"""Step: count the attempt's run time and outcome (the monitor writes them in batches)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django_taskrunner.worker.steps.run import Run

if TYPE_CHECKING:
    from django_taskrunner.worker.executor import Executor


def count_run(executor: Executor, run: Run) -> bool:
    """Record how long the attempt ran and whether it failed (after the time limit step)."""
    assert run.message is not None and run.task is not None and run.attempt is not None
    executor.stats.ran(run.message.queue, run.shown_name, run.attempt.elapsed(), run.error)
    return True
