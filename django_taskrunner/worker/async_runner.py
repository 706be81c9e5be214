"""The event loop of `async def` tasks: one per worker process, in a thread of its own.

A pool thread takes an async delivery through the first steps (decode, look up, expiry,
...) and hands it here (`submit`) without waiting, so an awaiting task holds no thread.
Up to `concurrency` coroutines run side by side; later ones wait for a slot. Each one
starts its attempt in the running set (so the heartbeat keeps its message and the
time-limit watchdog sees it), is awaited, and then its outcome steps (retry, failed row,
lock release, ack) run on a small thread pool: they make blocking calls (the database,
Redis), which must not stall the loop. Between the two, `close_old_connections()` runs
on the thread of `sync_to_async` (and of the async ORM methods), as it runs between two
sync tasks on a pool thread.

Time limits: at `time_limit` the watchdog cancels the coroutine (`Attempt.on_cancel`),
and the attempt fails with `TimeLimitExceeded` like a thread past its limit. A coroutine
that swallows the cancellation is given up on after `TIME_LIMIT_GRACE`, as a stuck
thread is; what it returns later is ignored.

A sync call inside a coroutine (`time.sleep`, `requests`, the sync ORM) blocks the loop
and so every async task of the process. `LoopStallWatch` notices and logs a warning with
the loop thread's stack, which names the blocking call.

Shutdown (`drain`): coroutines not started yet do not start; running ones get what is
left of `SHUTDOWN_TIMEOUT`; the deliveries of all that did not finish go back to their
queue (`unfinished`), as the worker does with its threads' messages.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections

from django_taskrunner.worker.fetcher import Delivery
from django_taskrunner.worker.steps import Run

if TYPE_CHECKING:
    from django_taskrunner.worker.executor import Executor

logger = logging.getLogger(__name__)

# Threads that run the outcome steps of finished coroutines (database and Redis writes).
SETTLE_THREADS = 4
# A loop that has not run its own tick for this long is reported as blocked.
STALL_WARNING = 1.0
TICK = 0.1
# Seconds the coroutines cancelled at the very end of a shutdown get to unwind.
CANCEL_WAIT = 1.0


@dataclass(eq=False)
class Job:
    """One async delivery in the runner: waiting for a slot, running, or being settled."""

    run: Run
    started: bool = False
    task: asyncio.Task[None] | None = None


class AsyncRunner:
    """Awaits the coroutines of `async def` tasks on one event loop, `concurrency` at once.

    `finished(delivery)` is called (on a settling thread) once a delivery handed over by
    `submit` is settled; `room()` when a coroutine took a slot, so the worker may fetch
    more (the slots in use count towards the messages it may hold).
    """

    def __init__(
        self, executor: Executor, concurrency: int, finished: Callable[[Delivery], None],
        room: Callable[[], None] = lambda: None, stall_warning: float = STALL_WARNING,
    ) -> None:
        self.executor = executor
        self.concurrency = concurrency
        self.finished = finished
        self.room = room
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=self._run_loop, name="taskrunner-asyncio",
                                       daemon=True)
        self.active = 0  # coroutines holding a slot now
        self._slots: asyncio.Semaphore | None = None
        self._jobs: set[Job] = set()
        self._lock = threading.Lock()
        self._accepting = True
        self._abandoning = False
        self._settler = ThreadPoolExecutor(SETTLE_THREADS, "taskrunner-async-settle")
        self.stall_watch = LoopStallWatch(self, stall_warning)

    @property
    def event_loop(self) -> asyncio.AbstractEventLoop:
        """The loop, once started."""
        assert self.loop is not None, "the runner is not started"
        return self.loop

    # -- from other threads -----------------------------------------------------------

    def start(self) -> None:
        """Start the loop's thread (the loop is made here, not for a worker never run)."""
        self.loop = asyncio.new_event_loop()
        self.thread.start()
        self.stall_watch.start()

    def submit(self, run: Run) -> None:
        """Run `run`'s attempt on the loop; returns at once (the loop settles it)."""
        job = Job(run)
        with self._lock:
            self._jobs.add(job)
        self.event_loop.call_soon_threadsafe(self._spawn, job)

    def stop_starting(self) -> None:
        """Shutdown begins: coroutines still waiting for a slot will not start."""
        self._accepting = False

    def drain(self, timeout: float, forced: threading.Event | None = None) -> bool:
        """Wait up to `timeout` s for the started coroutines to be settled; True if all were."""
        self.stop_starting()
        deadline = time.monotonic() + timeout
        while self._running_jobs():
            if time.monotonic() >= deadline or (forced is not None and forced.is_set()):
                return False
            time.sleep(0.02)
        return True

    def unfinished(self) -> list[Delivery]:
        """The deliveries handed over and not settled: they go back to their queue. (One
        the watchdog gave up on is settled already, though its coroutine may still run.)"""
        with self._lock:
            return [job.run.delivery for job in self._jobs if not self._given_up(job)]

    def stop(self) -> None:
        """Cancel what is left, stop the loop and its threads (after `drain`)."""
        self._abandoning = True
        self.stall_watch.stop()
        if self.loop is not None and self.thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._cancel_all(), self.loop)
            self.thread.join(CANCEL_WAIT + 1)
        self._settler.shutdown(wait=False, cancel_futures=True)

    def _running_jobs(self) -> int:
        with self._lock:
            return sum(1 for job in self._jobs if job.started and not self._given_up(job))

    def _given_up(self, job: Job) -> bool:
        attempt = job.run.attempt
        return attempt is not None and not self.executor.running.holds(attempt)

    # -- on the loop ------------------------------------------------------------------

    def _run_loop(self) -> None:
        loop = self.event_loop
        asyncio.set_event_loop(loop)
        self._slots = asyncio.Semaphore(self.concurrency)
        self.stall_watch.tick()
        try:
            loop.run_forever()
        finally:
            loop.close()

    def _spawn(self, job: Job) -> None:
        job.task = self.event_loop.create_task(self._drive(job))

    async def _cancel_all(self) -> None:
        """Cancel every coroutine left and let them unwind (briefly), then stop the loop."""
        tasks = [task for task in asyncio.all_tasks(self.event_loop)
                 if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CANCEL_WAIT)
        self.event_loop.stop()

    async def _drive(self, job: Job) -> None:
        assert self._slots is not None
        async with self._slots:
            if not self._accepting:
                return  # shutting down: it goes back to its queue, not started
            job.started = True
            self.active += 1
            self.room()
            try:
                error = await self._attempt(job.run)
            finally:
                self.active -= 1
        await connection_hygiene()
        await self.event_loop.run_in_executor(self._settler, self._settle, job, error)

    async def _attempt(self, run: Run) -> BaseException | None:
        """Start the attempt and await the task; what it raised, or None."""
        attempt = self.executor.begin(run)
        try:
            coroutine = self.executor.invoke(attempt)
        except BaseException as exc:  # noqa: BLE001 - a bad call is the attempt's failure
            return exc
        loop = self.event_loop
        inner = loop.create_task(guarded(kept(coroutine, attempt)))
        attempt.on_cancel = lambda: loop.call_soon_threadsafe(inner.cancel)
        if attempt.cancel.is_set():  # the watchdog was quicker than on_cancel
            inner.cancel()
        try:
            return await inner
        except asyncio.CancelledError as exc:
            if self._abandoning or not inner.cancelled():
                raise  # the loop is stopping: the message goes back to its queue
            return exc  # cancelled at its time limit: the time limit step names it

    def _settle(self, job: Job, error: BaseException | None) -> None:
        """On a settling thread: the outcome steps, then tell the worker it is done."""
        delivery = job.run.delivery
        try:
            self.executor.end(job.run, error)
        except Exception:
            logger.exception("could not finish message %s of queue %s; it stays pending",
                             delivery.stream_id, delivery.shard)
        finally:
            with self._lock:
                self._jobs.discard(job)
            self.finished(delivery)


async def connection_hygiene() -> None:
    """`close_old_connections()` on the thread that runs `sync_to_async` code and the
    async ORM methods (one shared thread), as between two sync tasks: a connection
    broken or past CONN_MAX_AGE is closed, instead of failing every later query."""
    try:
        await sync_to_async(close_old_connections)()
    except Exception:
        logger.exception("could not clean up the database connections of async tasks")


async def kept(coroutine: Coroutine[Any, Any, Any], attempt: Any) -> None:
    """Await a task's coroutine, keeping its return value for the task's record."""
    attempt.result = await coroutine


async def guarded(coroutine: Coroutine[Any, Any, Any]) -> BaseException | None:
    """Await a task's coroutine; return what it raised. Raised out of a Task, SystemExit or
    KeyboardInterrupt would stop the whole loop; a cancellation still propagates."""
    try:
        await coroutine
    except asyncio.CancelledError:
        raise
    except BaseException as exc:  # noqa: BLE001 - a task's SystemExit must not stop us
        return exc
    return None


class LoopStallWatch(threading.Thread):
    """Logs a warning when the loop has not run its tick for `threshold` seconds: a sync
    call inside a coroutine is blocking every async task of the process."""

    def __init__(self, runner: AsyncRunner, threshold: float) -> None:
        super().__init__(name="taskrunner-asyncio-watch", daemon=True)
        self.runner = runner
        self.threshold = threshold
        self.last_tick = time.monotonic()
        self.stalls = 0  # stalls reported so far
        self._stop_event = threading.Event()

    def tick(self) -> None:
        """On the loop: note that it is running, and come back in TICK seconds."""
        self.last_tick = time.monotonic()
        if not self._stop_event.is_set():
            self.runner.event_loop.call_later(TICK, self.tick)

    def run(self) -> None:
        reported = False
        while not self._stop_event.wait(min(TICK, self.threshold / 2)):
            lag = time.monotonic() - self.last_tick
            if lag > self.threshold and not reported:
                reported = True
                self.stalls += 1
                logger.warning("the event loop of async tasks has been blocked for %.1fs: a "
                               "sync call inside an async task stops every other one (use "
                               "await, or asgiref's sync_to_async); the loop is at:\n%s",
                               lag, self.loop_stack())
            elif lag <= self.threshold and reported:
                reported = False
                logger.info("the event loop of async tasks runs again")

    def loop_stack(self) -> str:
        """The innermost frames of the loop thread: where the blocking call is."""
        frame = sys._current_frames().get(self.runner.thread.ident or -1)
        if frame is None:
            return "  (unknown)"
        return "".join(traceback.format_stack(frame)[-4:]).rstrip()

    def stop(self) -> None:
        self._stop_event.set()
