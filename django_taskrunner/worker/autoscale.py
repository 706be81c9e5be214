"""Choosing the pool size from the figures: pure functions, no Redis, no threads, no clock.

The pool grows when the predicted wait is above `desired_wait + tolerance` and shrinks
when it is below `desired_wait - tolerance`, in one step to the size that would bring the
wait back to `desired_wait`:

    wanted = ceil(size × predicted_wait / desired_wait)

(the wait is inversely proportional to the threads serving the queue, so this worker's
share of the threads the backlog needs). A change is at least one thread, never leaves
`[min_workers, max_workers]`, and comes at most once per `cooldown` seconds. The worker's
monitor (`monitor.py`) feeds it the figures and applies what it decides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ScalingPolicy:
    """Bounds and goal of an autoscaled pool (settings MIN/MAX_WORKERS, DESIRED_WAIT...)."""

    min_workers: int
    max_workers: int
    desired_wait: float  # seconds, > 0
    tolerance: float  # seconds, < desired_wait
    cooldown: float  # seconds between two changes

    def __post_init__(self) -> None:
        if not 1 <= self.min_workers <= self.max_workers:
            raise ValueError(f"need 1 <= min_workers ({self.min_workers}) <= max_workers "
                             f"({self.max_workers})")
        if not 0 <= self.tolerance < self.desired_wait:
            raise ValueError(f"need 0 <= tolerance ({self.tolerance}) < desired_wait "
                             f"({self.desired_wait})")
        if self.cooldown < 0:
            raise ValueError(f"cooldown must be >= 0, not {self.cooldown}")

    def clamp(self, size: int) -> int:
        return max(self.min_workers, min(self.max_workers, size))


def default_tolerance(desired_wait: float, tolerance: float | None) -> float:
    """DESIRED_WAIT_TOLERANCE, or half of DESIRED_WAIT when it is None."""
    return desired_wait / 2 if tolerance is None else float(tolerance)


def wanted_size(policy: ScalingPolicy, size: int, predicted_wait: float | None) -> int:
    """The pool size the figures call for (the current `size` when they are in band)."""
    if predicted_wait is None:
        return policy.clamp(size)
    proportional = math.ceil(size * predicted_wait / policy.desired_wait)
    if predicted_wait > policy.desired_wait + policy.tolerance:
        return policy.clamp(max(size + 1, proportional))
    if predicted_wait < policy.desired_wait - policy.tolerance:
        return policy.clamp(min(size - 1, proportional))
    return policy.clamp(size)


def decide(
    policy: ScalingPolicy, size: int, predicted_wait: float | None, *,
    last_change: float | None, now: float,
) -> int | None:
    """The new pool size, or None to keep `size` (in band, at a bound, or cooling down).

    `now` and `last_change` are seconds on one monotonic clock; `last_change` is None
    before the first change.
    """
    if last_change is not None and now - last_change < policy.cooldown:
        return None
    wanted = wanted_size(policy, size, predicted_wait)
    return None if wanted == size else wanted
