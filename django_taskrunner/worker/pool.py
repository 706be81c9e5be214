"""A fixed set of worker threads fed from one in-memory inbox.

Plain threads and a `SimpleQueue`, not a ThreadPoolExecutor: no Future per task, and
the pool can grow or shrink between tasks (a shrink never interrupts a running one).
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
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
