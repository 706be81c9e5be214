"""`TaskContext`: what a `takes_context=True` task receives besides its payload."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django_taskrunner.core import steps
from django_taskrunner.core.steps import Steps


@dataclass
class TaskContext:
    """The running attempt: its ids, a heartbeat, and a flag set when it should stop."""

    id: str
    task_name: str
    queue: str
    attempt: int
    _heartbeat: Callable[[], bool] = field(repr=False, default=lambda: True)
    _cancel: threading.Event = field(repr=False, default_factory=threading.Event)
    _progress: Callable[[Any], None] = field(repr=False, default=lambda value: None)
    # A workflow member's reader of what the step before it returned (core/workflows.py).
    _parent: Callable[[], Any] = field(repr=False, default=lambda: None)
    # --- durable steps (core/steps.py): None outside a worker's or eager attempt ---
    _steps: Steps | None = field(repr=False, default=None)

    def heartbeat(self) -> bool:
        """Tell the queue this attempt is alive, so its message is not reclaimed.

        Returns False when the message is no longer held by this worker.
        """
        return self._heartbeat()

    @property
    def cancelled(self) -> bool:
        """True once the attempt should stop: its time limit passed, the worker is
        shutting down, or someone called `cancel(id)` (seen within a second)."""
        return self._cancel.is_set()

    def set_progress(self, value: Any) -> None:
        """Make `value` (any JSON value) the task's progress, as `lookup(id).progress`.

        Written with the worker's next heartbeat (within a second), not one round trip
        per call: call it as often as you like.

        Raises:
            ValueError: `value` is not JSON, or its JSON is over 64 KiB
                (`core.records.VALUE_MAX_BYTES`).
        """
        self._progress(value)

    @property
    def parent_result(self) -> Any:
        """In a workflow: the return value of the step before (None for the first), or
        for a step after a group the list of its members' results in order (None for a
        member that failed). Read from their task records on first use, then kept."""
        if not hasattr(self, "_parent_value"):
            self._parent_value = self._parent()
        return self._parent_value

    # --- durable steps (core/steps.py, docs/steps.md) ---
    def step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run `fn(*args, **kwargs)` once per task id and keep its JSON result: a later
        attempt of this task id returns the kept result without calling `fn`. For an
        `async def fn`, await it: `await ctx.step(...)`.

        Raises:
            DuplicateStep: `name` was used already in this attempt.
            InvalidTaskPayload: `fn` returned a value that is not JSON (nothing is kept).
            ValueError: `name` is empty or over 200 characters.
            RuntimeError: this context belongs to no running task.
        """
        if self._steps is None:
            raise RuntimeError("ctx.step needs the context of a running task")
        if inspect.iscoroutinefunction(fn):
            return self._steps.arun(name, fn, args, kwargs)
        return self._steps.run(name, fn, args, kwargs)

    def step_key(self, name: str) -> str:
        """A stable string for this task id and step: an idempotency key for an external
        API, the same on every attempt."""
        return steps.step_key(self.id, name)
    # --- end of durable steps ---
