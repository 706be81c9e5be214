"""`TaskContext`: what a `takes_context=True` task receives besides its payload."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class TaskContext:
    """The running attempt: its ids, a heartbeat, and a flag set when it should stop."""

    id: str
    task_name: str
    queue: str
    attempt: int
    _heartbeat: Callable[[], bool] = field(repr=False, default=lambda: True)
    _cancel: threading.Event = field(repr=False, default_factory=threading.Event)

    def heartbeat(self) -> bool:
        """Tell the queue this attempt is alive, so its message is not reclaimed.

        Returns False when the message is no longer held by this worker.
        """
        return self._heartbeat()

    @property
    def cancelled(self) -> bool:
        """True once the attempt should stop (its time limit passed)."""
        return self._cancel.is_set()
