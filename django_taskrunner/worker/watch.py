"""The worker's watch over its own threads: each must live until the worker stops.

A fetcher, the acker, the heartbeat, the monitor... catch what they expect (outages,
bad data) and go on. One that ends by any other exception is a bug; left dead, it
would leave a worker that seems alive but, say, runs tasks it can no longer ack. So
its death is noted here, and the worker stops and exits with `THREAD_DIED_EXIT`, for
its supervisor to start a whole worker again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

logger = logging.getLogger(__name__)

# The exit code of a worker one of whose threads died (EX_SOFTWARE).
THREAD_DIED_EXIT = 70


class ThreadWatch:
    """Notes which of the watched threads ended by an exception."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._died: list[str] = []
        self._told = False

    def watch(self, threads: Iterable[threading.Thread]) -> None:
        """Watch `threads` (before they start): their `run` notes an exception's exit."""
        for thread in threads:
            thread.run = self._watched(thread.run, thread.name)  # type: ignore[method-assign]

    def died(self) -> bool:
        """True once a watched thread died (logged the first time)."""
        with self._lock:
            dead, told, self._told = self._died[:1], self._told, self._told or bool(self._died)
        if dead and not told:
            logger.critical("internal thread %s died unexpectedly (its traceback is above); "
                            "stopping this worker with exit code %d so that its supervisor "
                            "starts it again", dead[0], THREAD_DIED_EXIT)
        return bool(dead)

    def _watched(self, run: Callable[[], None], name: str) -> Callable[[], None]:
        """`run`, noting `name` when it ends by an exception (raised on, so that its
        traceback is logged as any thread's)."""
        def watched() -> None:
            try:
                run()
            except BaseException:
                with self._lock:
                    self._died.append(name)
                raise

        return watched
