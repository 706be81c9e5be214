"""Stopping a running task without its cooperation: at its time limit, or on
`cancel(id, terminate=True)`.

Time limits on a thread-based worker:

An `async def` task is cancelled at its limit (the coroutine sees `CancelledError` at its
next `await`); one that swallows it is given up on after the grace like a thread.

Python cannot kill a thread. So past a task's `time_limit` the watchdog sets
`ctx.cancelled` (a task that checks it can stop cleanly), and the attempt counts as
failed whatever it returns. If the thread is still running `TIME_LIMIT_GRACE` seconds
later, the worker gives up on it: the attempt is settled as failed (retried per
`max_retry`), the pool starts a replacement thread so capacity is kept, and whatever
the stuck thread returns later is ignored. The watchdog also raises `TaskInterrupted`
inside the stuck thread: pure-Python code stops at its next bytecode, but a thread
blocked in C (a socket read without timeout, `time.sleep`, a database query, an
extension that holds the GIL) only sees it when that call returns.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from django_taskrunner.core import clock
from django_taskrunner.worker.running import Attempt, RunningSet

if TYPE_CHECKING:
    from django_taskrunner.worker.running import Attempt


logger = logging.getLogger(__name__)

MAX_SLEEP = 1.0


class TaskInterrupted(BaseException):
    """Raised inside a task thread the worker gave up on (a BaseException, so a task's
    `except Exception:` does not swallow it)."""


def interrupt(thread: threading.Thread) -> bool:
    """Ask `thread` to raise `TaskInterrupted` at its next bytecode; False if it is gone."""
    if thread.ident is None or not thread.is_alive():
        return False
    done = ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread.ident), ctypes.py_object(TaskInterrupted))
    return bool(done == 1)


class TimeLimitWatchdog(threading.Thread):
    """Cancels attempts past their time limit and gives up on those stuck past the grace."""

    def __init__(
        self, running: RunningSet, grace: float, give_up: Callable[[Attempt], None]
    ) -> None:
        super().__init__(name="taskrunner-timelimit", daemon=True)
        self.running = running
        self.grace = grace
        self.give_up = give_up
        self._wake = threading.Event()
        self._stopping = False

    def wake(self) -> None:
        """A time-limited attempt started: recompute the next deadline."""
        self._wake.set()

    def run(self) -> None:
        while not self._stopping:
            self._wake.clear()  # before the check: a wake-up during it is not missed
            self._wake.wait(self.check())

    def check(self) -> float:
        """Act on every attempt that is due; returns seconds until the next one is."""
        now = clock.monotonic()
        next_due = now + MAX_SLEEP
        for attempt in self.running.snapshot():
            deadline = attempt.deadline
            if deadline is None:
                continue
            if now >= deadline and not attempt.cancel.is_set():
                logger.warning("task=%s id=%s passed its time limit of %gs; ctx.cancelled is "
                               "set%s", attempt.task.name, attempt.message.id,
                               attempt.time_limit,
                               " and its coroutine cancelled" if attempt.coroutine else "")
                attempt.request_cancel()
            if now >= deadline + self.grace:
                self._abandon(attempt)
                continue
            next_due = min(next_due, deadline if now < deadline else deadline + self.grace)
        return max(0.01, next_due - now)

    def _abandon(self, attempt: Attempt) -> None:
        if not self.running.settle(attempt):
            return  # it returned just now; its own thread settles it
        logger.error("task=%s id=%s ignored its time limit for %gs more; its %s and its "
                     "result will be ignored", attempt.task.name, attempt.message.id,
                     self.grace, "coroutine is left to itself" if attempt.coroutine
                     else "thread is replaced")
        try:
            self.give_up(attempt)
        except Exception:
            logger.exception("could not settle task=%s id=%s after its time limit",
                             attempt.task.name, attempt.message.id)

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self.is_alive():
            self.join()


# `cancel(id, terminate=True)`: stop a running task without its cooperation.
#
# - In a pool thread, `TaskInterrupted` is raised inside the task
#   (`PyThreadState_SetAsyncExc`, as the time-limit watchdog does for a stuck thread), so
#   the attempt ends at once and is settled as cancelled by `stop_cancelled`: not retried,
#   its lock and task id freed. Pure-Python code stops at its next bytecode; a call blocked
#   in C (`time.sleep`, a socket read, a database query) only when it returns.
# - An `async def` task on the worker's event loop is cancelled already by the cancel
#   itself (`Attempt.on_cancel`); nothing more is done here.
# - A sync attempt run in a child of `runtasks --processes` has `Attempt.on_terminate`
#   (set by `worker/child.py` as it starts): it is called instead, and asks the supervisor
#   to end (and replace) the process; the supervisor records the task cancelled and hands
#   the child's other messages back without an attempt (`reclaim.py`, the hand-back).
#
# An exception raised in a thread by another must never land outside the task: on the
# worker's own code, the pool loop or the next task. So it is only sent while the thread
# is between `entering` and `leaving` (a flag set under `_lock`), and `leaving` clears any
# exception still pending for the thread, under the same lock, before the thread goes on.
# A terminate heard before the attempt entered its task raises there instead (`entering`).


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
