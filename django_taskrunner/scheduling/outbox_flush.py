"""The leader's outbox flusher: moves the rows the fast path left behind (Redis was
down, or the web process died between its commit and the move) onto their streams.

A thread beside the scheduler, in the worker that leads. Every `INTERVAL_SECONDS` it
runs `core.outbox.flush_all`, which is safe side by side with the fast path and with
any other flusher (row locks, and marks in Redis: `core/outbox.py`), so a lease
hand-over that leaves two leaders for a moment queues nothing twice.
"""

from __future__ import annotations

import logging
import threading

from django.db import DEFAULT_DB_ALIAS, DatabaseError, close_old_connections, connections

from django_taskrunner.core import outbox
from django_taskrunner.store.errors import REDIS_DOWN

logger = logging.getLogger(__name__)

INTERVAL_SECONDS = 1.0  # an empty outbox costs one small SELECT this often
BATCHES_PER_TURN = 50  # 5,000 rows, then a pause, so a backlog does not hog the database


class OutboxFlusher(threading.Thread):
    """Flushes the outbox of database `using` until `stop()`."""

    def __init__(self, *, interval: float = INTERVAL_SECONDS,
                 using: str = DEFAULT_DB_ALIAS) -> None:
        super().__init__(name="taskrunner-outbox", daemon=True)
        self.interval = interval
        self.using = using
        self.moved = 0  # rows settled so far
        self._stopping = threading.Event()

    def stop(self, timeout: float = 10.0) -> None:
        """Finish the current batch and end the thread."""
        self._stopping.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)

    def run(self) -> None:
        down = False
        try:
            while not self._stopping.is_set():
                down = self.turn(down)
                self._stopping.wait(self.interval)
        finally:
            connections[self.using].close()

    def turn(self, down: bool) -> bool:
        """One flush of everything waiting; returns whether Redis is down now (logged
        once when an outage starts and once when it ends)."""
        close_old_connections()
        try:
            moved = outbox.flush_all(self.using, max_batches=BATCHES_PER_TURN)
        except REDIS_DOWN as exc:
            if not down:
                logger.warning("outbox: Redis is unreachable (%s); its rows wait", exc)
            return True
        except DatabaseError as exc:
            logger.warning("outbox: cannot read the outbox table (%s); retrying", exc)
            return down
        except Exception:
            logger.exception("outbox: unexpected error; going on")
            return down
        self.moved += moved
        if down:
            logger.warning("outbox: Redis is back; moved %d waiting task(s)", moved)
        elif moved:
            # The usual reason is a race, not a loss: a row is visible from its commit until
            # its dispatching process has moved it (slowest on its first dispatch, which
            # connects to Redis and loads the scripts), and either mover queues it once.
            logger.debug("outbox: moved %d task(s) before (or instead of) their dispatching "
                         "process", moved)
        return False


def flush_waiting(using: str = DEFAULT_DB_ALIAS) -> int:
    """`runtasks --burst`, which runs no leader: move what waits in the outbox now, so it
    counts as due work; 0 (logged) when the outbox or Redis cannot be reached."""
    try:
        return outbox.flush_all(using, max_batches=BATCHES_PER_TURN)
    except REDIS_DOWN as exc:
        logger.error("burst: cannot move the outbox's tasks (%s); retrying", exc)
    except DatabaseError as exc:
        logger.warning("burst: cannot read the outbox table (%s)", exc)
    return 0
