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
