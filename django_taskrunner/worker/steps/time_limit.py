"""Step: an attempt that ran past its task's `time_limit` failed, whatever it returned
(also one the watchdog gave up on, which returned nothing)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django_taskrunner.exceptions import TimeLimitExceeded
from django_taskrunner.worker.running import Attempt
from django_taskrunner.worker.steps.run import Run

if TYPE_CHECKING:
    from django_taskrunner.worker.executor import Executor


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
