"""The pool: a set of worker threads fed from one in-memory inbox, and how many it should
have (`--autoscale`, decided from the figures by pure functions, below).

Plain threads and a `SimpleQueue`, not a ThreadPoolExecutor: no Future per task, and
the pool can grow or shrink between tasks (a shrink never interrupts a running one).
"""

from __future__ import annotations

import itertools
import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

_STOP = object()
_names = itertools.count(1)


class Pool:
    """Threads that call `run(item)` for each submitted item."""

    def __init__(self, size: int, run: Callable[[Any], None]) -> None:
        self._run = run
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self._running: dict[threading.Thread, Any] = {}
        self._abandoned: set[threading.Thread] = set()
        self._target = 0
        self.resize(size)

    @property
    def size(self) -> int:
        """How many threads the pool is meant to have."""
        return self._target

    def submit(self, item: Any) -> None:
        self._inbox.put(item)

    def resize(self, size: int) -> None:
        """Start or retire threads until `size` remain; retiring ones finish their task first."""
        with self._lock:
            change, self._target = size - self._target, size
            for _ in range(max(change, 0)):
                thread = threading.Thread(target=self._loop, name=f"taskrunner-{next(_names)}",
                                          daemon=True)
                self._threads.add(thread)
                thread.start()
        for _ in range(max(-change, 0)):
            self._inbox.put(_STOP)

    def _loop(self) -> None:
        me = threading.current_thread()
        try:
            while True:
                item = self._inbox.get()
                if item is _STOP:
                    return
                self._running[me] = item
                try:
                    self._run(item)
                except BaseException:
                    if me not in self._abandoned:
                        raise
                finally:
                    self._running.pop(me, None)
                if me in self._abandoned:
                    return
        finally:
            with self._lock:
                self._threads.discard(me)
                self._abandoned.discard(me)

    def abandon(self, thread: threading.Thread) -> None:
        """Stop counting a thread stuck in its task: start a replacement at once.

        The stuck thread exits when its task finally returns; what it raises is ignored.
        """
        with self._lock:
            if thread not in self._threads:
                return
            self._threads.discard(thread)
            self._abandoned.add(thread)
            self._running.pop(thread, None)
            replacement = threading.Thread(target=self._loop, name=f"taskrunner-{next(_names)}",
                                           daemon=True)
            self._threads.add(replacement)
            replacement.start()

    @property
    def abandoned(self) -> int:
        """Threads given up on that are still stuck in their task."""
        return len(self._abandoned)

    def running_items(self) -> list[Any]:
        """Items being run right now."""
        return list(self._running.values())

    def drain_inbox(self) -> list[Any]:
        """Take every item not yet started out of the inbox."""
        taken = []
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return taken
            if item is not _STOP:
                taken.append(item)

    def join(self, timeout: float) -> bool:
        """Stop every thread once its task is done; True if all ended within `timeout`."""
        self.resize(0)
        deadline = time.monotonic() + timeout
        for thread in list(self._threads):
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in list(self._threads))


# Choosing the pool size from the figures: pure functions, no Redis, no threads, no clock.
#
# The pool grows when the predicted wait is above `desired_wait + tolerance` and shrinks
# when it is below `desired_wait - tolerance`, in one step to the size that would bring the
# wait back to `desired_wait`:
#
#     wanted = ceil(size × predicted_wait / desired_wait)
#
# (the wait is inversely proportional to the threads serving the queue, so this worker's
# share of the threads the backlog needs). A change is at least one thread, never leaves
# `[min_workers, max_workers]`, and comes at most once per `cooldown` seconds. The worker's
# monitor (`monitor.py`) feeds it the figures and applies what it decides.

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
