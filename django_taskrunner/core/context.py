"""`TaskContext`: what a `takes_context=True` task receives besides its payload."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


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
