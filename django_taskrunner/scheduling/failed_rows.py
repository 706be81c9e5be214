"""The leader's flusher of the `FailedTask` rows kept in Redis while the database refused
them (`worker/failures.py`): it writes them once the database answers.

A thread beside the scheduler, in the worker that leads. Every `INTERVAL_SECONDS` one
HSCAN of the waiting rows (nothing more when none wait); while the database refuses, it
tries again after a wait that doubles up to `MAX_BACKOFF_SECONDS`, logging the outage
once and its end once. Two leaders for a moment (a lease hand-over) write each row once:
it is the same get-or-create of one row per dispatch.
"""

from __future__ import annotations

import logging
import threading

from django.db import DEFAULT_DB_ALIAS, close_old_connections, connections
from django.db import Error as DatabaseError

from django_taskrunner.store.errors import REDIS_DOWN
from django_taskrunner.worker.failures import flush_failed_rows

logger = logging.getLogger(__name__)

INTERVAL_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 60.0


class FailedRowsFlusher(threading.Thread):
    """Writes the kept failed rows until `stop()`."""

    def __init__(self, *, interval: float = INTERVAL_SECONDS) -> None:
        super().__init__(name="taskrunner-failed-rows", daemon=True)
        self.interval = interval
        self.written = 0  # rows settled so far
        self.failures = 0  # turns in a row the database (or Redis) refused
        self._stopping = threading.Event()

    def stop(self, timeout: float = 10.0) -> None:
        """Finish the current batch and end the thread."""
        self._stopping.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)

    def run(self) -> None:
        try:
            while not self._stopping.is_set():
                self.turn()
                wait = (self.interval if not self.failures else
                        min(MAX_BACKOFF_SECONDS, self.interval * 2 ** self.failures))
                self._stopping.wait(wait)
        finally:
            connections[DEFAULT_DB_ALIAS].close()

    def turn(self) -> None:
        """Write what waits, batch after batch; on a refusal, count it for the backoff."""
        close_old_connections()
        try:
            while (written := flush_failed_rows()) and not self._stopping.is_set():
                self._settled(written)
        except (DatabaseError, *REDIS_DOWN) as exc:
            if not self.failures:
                logger.warning("failed rows: cannot write the rows kept in Redis (%s); "
                               "retrying with backoff", exc)
            self.failures += 1
            close_old_connections()
        except Exception:
            logger.exception("failed rows: unexpected error; going on")
            self.failures += 1

    def _settled(self, written: int) -> None:
        self.written += written
        if self.failures:
            logger.warning("failed rows: the database answers again; writing the rows kept")
            self.failures = 0
        else:
            logger.info("failed rows: wrote %d FailedTask row(s) kept in Redis", written)
