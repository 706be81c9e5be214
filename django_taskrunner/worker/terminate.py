"""`cancel(id, terminate=True)`: stop a running task without its cooperation.

- In a pool thread, `TaskInterrupted` is raised inside the task
  (`PyThreadState_SetAsyncExc`, as the time-limit watchdog does for a stuck thread), so
  the attempt ends at once and is settled as cancelled by `stop_cancelled`: not retried,
  its lock and task id freed. Pure-Python code stops at its next bytecode; a call blocked
  in C (`time.sleep`, a socket read, a database query) only when it returns.
- An `async def` task on the worker's event loop is cancelled already by the cancel
  itself (`Attempt.on_cancel`); nothing more is done here.
- A sync attempt run in a child of `runtasks --processes` has `Attempt.on_terminate`
  (set by `worker/child.py` as it starts): it is called instead, and asks the supervisor
  to end (and replace) the process; the supervisor records the task cancelled and hands
  the child's other messages back without an attempt (`handback.py`).

An exception raised in a thread by another must never land outside the task: on the
worker's own code, the pool loop or the next task. So it is only sent while the thread
is between `entering` and `leaving` (a flag set under `_lock`), and `leaving` clears any
exception still pending for the thread, under the same lock, before the thread goes on.
A terminate heard before the attempt entered its task raises there instead (`entering`).
"""

from __future__ import annotations

import ctypes
import logging
import threading
from typing import TYPE_CHECKING

from django_taskrunner.worker.timelimit import TaskInterrupted, interrupt

if TYPE_CHECKING:
    from django_taskrunner.worker.running import Attempt

logger = logging.getLogger(__name__)

_lock = threading.Lock()


def entering(attempt: Attempt) -> None:
    """The thread is about to call the task function; raises `TaskInterrupted` when a
    terminate came first."""
    with _lock:
        if attempt.terminate_requested:
            raise TaskInterrupted(f"task {attempt.message.id} was terminated")
        attempt.in_task = True


def leaving(attempt: Attempt) -> None:
    """The task function returned (or raised): no interrupt may reach this thread now."""
    while True:
        try:
            with _lock:
                attempt.in_task = False
                if attempt.terminate_requested and attempt.thread.ident is not None:
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(
                        ctypes.c_ulong(attempt.thread.ident), None)  # clear a pending one
            return
        except TaskInterrupted:  # delivered before the clear: clear again
            continue


def terminate(attempt: Attempt) -> None:
    """Stop the attempt: interrupt its thread while it runs the task, or call its
    process's `on_terminate`; a coroutine was cancelled by the cancel already."""
    if attempt.on_terminate is not None:
        attempt.on_terminate()
        return
    if attempt.coroutine:
        return
    with _lock:
        attempt.terminate_requested = True
        if attempt.in_task and interrupt(attempt.thread):
            logger.info("task %s (%s): terminated, TaskInterrupted raised in its thread",
                        attempt.message.id, attempt.task.name)
