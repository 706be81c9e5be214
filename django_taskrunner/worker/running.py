"""The attempts a worker is running right now, shared by the threads that watch them.

The heartbeat keeps their messages reserved, the time-limit watchdog cancels them, and
exactly one party settles each attempt: the thread that ran it, when the task returns,
or the watchdog, when it gives up on a thread stuck past its time limit. Whoever comes
second does nothing, so a stuck thread's late result is ignored.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django_taskrunner.core import clock
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.core.task import Task
from django_taskrunner.store.limits import Slot


@dataclass(eq=False)
class Attempt:
    """One run of a message, on one thread (or, `coroutine`, on the event loop's)."""

    task: Task
    message: TaskMessage
    thread: threading.Thread
    reservation_timeout: float
    shard: str  # the stream the message was read from (its queue, or one shard of it)
    started: float = field(default_factory=lambda: clock.monotonic())  # the clock of now
    started_ms: int = field(default_factory=lambda: clock.now_ms())  # wall clock, for records
    result: Any = None  # what the task returned
    # Its record: seconds a finished one is kept (0: the task keeps none), whether the
    # heartbeat wrote "running" yet, the progress (JSON) it has not written yet, and
    # whether someone cancelled the task (read by the heartbeat).
    record_ttl: int = 0
    start_recorded: bool = False
    # No earlier run of its task id can have kept a durable step (`core.steps.first_run`):
    # its first `ctx.step` reads nothing; and whether it kept one (`steps_kept`): the
    # record writes of a first run that kept none leave the steps alone.
    first_run: bool = False
    kept_steps: bool = False
    progress: str | None = None
    cancel_requested: bool = False
    # cancel(id, terminate=True) (`worker/interrupt.py`): asked; the thread is inside the
    # task function now; and the hook of an attempt run in a child process.
    terminate_requested: bool = False
    in_task: bool = False
    on_terminate: Callable[[], None] | None = None

    def set_progress(self, encoded: str) -> None:
        """Keep the task's latest progress (JSON) for the heartbeat to write."""
        self.progress = encoded

    def steps_kept(self) -> None:
        """A durable step of this attempt was kept (called by its `Steps`)."""
        self.kept_steps = True

    def take_progress(self) -> str | None:
        """The progress not written yet, once (the heartbeat writes it)."""
        progress, self.progress = self.progress, None
        return progress

    def cancelled_by_request(self) -> None:
        """Someone cancelled the task: tell it through `ctx.cancelled`."""
        self.cancel_requested = True
        self.request_cancel()
    coroutine: bool = False  # awaited on the worker's event loop: no thread of its own
    on_cancel: Callable[[], None] | None = None  # cancels the coroutine (from any thread)
    slots: tuple[Slot, ...] = ()  # concurrency slots held (the heartbeat renews them)

    @property
    def cancel(self) -> threading.Event:
        """Set when the attempt should stop: its time limit, a shutdown, or a cancel
        (`ctx.cancelled`). Made on first use: most attempts never need one, and an Event
        costs microseconds to build. `setdefault` is atomic, so the task thread, the
        watchdog and the heartbeat always get the same one."""
        event = self.__dict__.get("_cancel")
        if event is None:
            event = self.__dict__.setdefault("_cancel", threading.Event())
        return event

    def request_cancel(self) -> None:
        """Its time limit passed: set `ctx.cancelled`, and cancel a coroutine."""
        self.cancel.set()
        if self.on_cancel is not None:
            self.on_cancel()

    @property
    def queue(self) -> str:
        return self.message.queue

    @property
    def stream_id(self) -> str:
        return self.message.stream_id or ""

    @property
    def time_limit(self) -> float | None:
        return self.task.options.time_limit

    @property
    def deadline(self) -> float | None:
        """Monotonic time at which the attempt passes its time limit (None: no limit)."""
        limit = self.time_limit
        return None if limit is None else self.started + limit

    def elapsed(self) -> float:
        return clock.monotonic() - self.started

    def over_time_limit(self) -> bool:
        limit = self.time_limit
        return limit is not None and self.elapsed() > limit


class RunningSet:
    """Thread-safe set of running attempts; `on_change` hears of each new time-limited one,
    and every listener added with `on_start()` hears of each new attempt (the heartbeat,
    which must beat a short-timeout attempt sooner than it planned)."""

    def __init__(self, on_change: Callable[[], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._attempts: set[Attempt] = set()
        self._on_change = on_change
        self._listeners: list[Callable[[Attempt], None]] = []
        self._settle_listeners: list[Callable[[Attempt], None]] = []

    def on_settle(self, listener: Callable[[Attempt], None]) -> None:
        """Call `listener(attempt)` each time an attempt is settled (a child process tells
        its supervisor which messages it no longer runs: `worker/child.py`)."""
        self._settle_listeners.append(listener)

    def on_start(self, listener: Callable[[Attempt], None]) -> None:
        """Call `listener(attempt)` on the starting thread each time an attempt starts."""
        self._listeners.append(listener)

    def start(
        self, task: Task, message: TaskMessage, reservation_timeout: float,
        shard: str | None = None, record_ttl: int = 0, *, coroutine: bool = False,
        first_run: bool = False,
    ) -> Attempt:
        """Register the attempt the current thread is about to run (read from `shard`,
        by default the message's queue; `record_ttl` 0: its task keeps no record)."""
        attempt = Attempt(task, message, threading.current_thread(), reservation_timeout,
                          message.queue if shard is None else shard, record_ttl=record_ttl,
                          coroutine=coroutine, first_run=first_run)
        with self._lock:
            self._attempts.add(attempt)
        if attempt.time_limit is not None and self._on_change is not None:
            self._on_change()
        for listener in self._listeners:
            listener(attempt)
        return attempt

    def settle(self, attempt: Attempt) -> bool:
        """Take the attempt out; True for the first caller only, who decides its outcome."""
        with self._lock:
            if attempt not in self._attempts:
                return False
            self._attempts.discard(attempt)
        for listener in self._settle_listeners:
            listener(attempt)
        return True

    def holds(self, attempt: Attempt) -> bool:
        """True until the attempt is settled (by its runner, or given up on)."""
        with self._lock:
            return attempt in self._attempts

    def snapshot(self) -> list[Attempt]:
        with self._lock:
            return list(self._attempts)


def describe(attempts: Sequence[Attempt], most: int = 5) -> str:
    """'name id=... running 12s, ...' for the first `most` attempts, for a log line."""
    shown = [f"{a.task.name} id={a.message.id} running {a.elapsed():.0f}s"
             for a in sorted(attempts, key=lambda a: a.started)[:most]]
    more = len(attempts) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")
