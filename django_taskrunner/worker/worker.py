"""The worker: fetchers read streams into a bounded buffer, a pool runs the tasks,
an acker acks finished ones in batches. No argparse here; `runtasks` builds a Worker.

Beside them: a heartbeat keeps every message held (running or buffered) reserved, the
fetchers take over dead workers' messages first, a watchdog enforces time limits
(keepalive.py, reclaim.py, interrupt.py); a Redis outage stops none of them (outage.py).

Shutdown (`request_stop()`, from SIGTERM/SIGINT): fetchers stop reading, running tasks
get `shutdown_timeout` seconds to finish, and every message this worker holds but did
not finish is put back on its stream for another worker. Nothing is lost.

Unless told not to, a worker also stands for election as its consumer group's leader;
while it leads, a scheduler thread moves due delayed tasks onto their streams and fires
periodic tasks. Burst mode moves what is already due instead. Both are the leader's part
(`scheduling/`), which the runner (`runner.py`) puts beside the worker as `Beside`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from django_taskrunner.core import clock, sharding
from django_taskrunner.store import keys
from django_taskrunner.store.connection import connection_name, make_room, name_connections
from django_taskrunner.store.errors import REDIS_DOWN, REDIS_ERROR
from django_taskrunner.store.streams import Broker, Entry
from django_taskrunner.worker.acker import Acker
from django_taskrunner.worker.async_runner import AsyncRunner
from django_taskrunner.worker.cancels import CancelListener
from django_taskrunner.worker.executor import Executor
from django_taskrunner.worker.fetcher import Delivery, Fetcher, Prefetch, stop_fetchers
from django_taskrunner.worker.interrupt import TimeLimitWatchdog, interrupt
from django_taskrunner.worker.keepalive import Heartbeat
from django_taskrunner.worker.lost_workers import LOST_EXIT, ReturnGuard
from django_taskrunner.worker.monitor import THREAD_DIED_EXIT, Monitor, ThreadWatch
from django_taskrunner.worker.outage import RedisStatus
from django_taskrunner.worker.pool import Pool
from django_taskrunner.worker.reclaim import Reclaimer, shortest_timeout
from django_taskrunner.worker.running import Attempt, RunningSet, describe
from django_taskrunner.worker.settings import OWN_CONNECTIONS, WorkerSettings
from django_taskrunner.worker.steps import put_back, requeued_write
from django_taskrunner.worker.turns import PauseWatch, QueueTurns

logger = logging.getLogger(__name__)


class Leader(Protocol):
    """The leader's part of a process: stands for election as it starts, resigns as it stops."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class Beside:
    """What the runner puts beside a worker (`runner.py`), so that the worker calls the
    scheduling part at the right moments without importing it."""

    leader: Leader | None = None  # started after the fetchers, stopped first on shutdown
    register_queues: Callable[[], None] = lambda: None  # records the queues consumed
    move_due: Callable[[], int] = lambda: 0  # burst mode: moves what is due; how many


class Worker:
    """Runs tasks from `queues` until stopped (or, in burst mode, until all are empty)."""

    def __init__(self, broker: Broker, settings: WorkerSettings,
                 beside: Beside | None = None) -> None:
        self.broker = broker
        self.beside = beside or Beside()
        self.settings = settings
        self.queues = list(settings.queues)
        self.consumer = settings.consumer
        self.stopping = threading.Event()
        self.paused = threading.Event()  # fetch nothing more (a child past its limits)
        self.forced = threading.Event()
        self.status = RedisStatus()
        self.returning = ReturnGuard(broker, self.consumer, settings.lost_after, self._leave)
        self.acker = Acker(broker, self.consumer, on_requeued=self._work_appeared,
                           confirm=self.returning.confirm)
        # Writes statistics and the heartbeat; resizes the pool when it autoscales.
        self.monitor = Monitor(self, settings)
        self._build_guards(settings)
        self.pool = Pool(0, self._run_item)
        self._lock = threading.RLock()  # per task: `with self._lock` skips Condition's Python
        self._cond = threading.Condition(self._lock)
        self.outstanding = 0  # fetched and not yet finished
        # The read size. Weights share out reads, so weighted queues keep reads of one size.
        weighted = any(weight for _queue, weight in settings.queue_order or ())
        self.prefetch = Prefetch(settings.batch_size, 0 if weighted else settings.prefetch_ms)
        self.completed = 0  # finished so far; tells burst mode that work may have appeared
        self.promotions = 0  # burst mode: passes that moved due delayed tasks to the streams
        self.requeues = 0  # batches of retries the acker has put back on the streams
        self.scheduling = self.beside.leader
        self._leftovers: list[Delivery] = []
        self.threads = ThreadWatch()  # a thread that dies takes the worker down
        # Set by child.py: asks the supervisor to end the process for a stuck thread (True: will)
        self.end_process: Callable[[Attempt], bool] | None = None
        self._held: set[tuple[str, str]] = set()  # (queue, stream id) fetched, not finished
        # One reader per stream: a queue split into shards has one stream per shard.
        self.pauses = PauseWatch(self)  # paused queues: fetchers skip them (pause_queue)
        self.fetchers = [Fetcher(self, shard) for shard in sharding.all_shards(self.queues)]
        # `runtasks -Q a -Q b[:weight]`: which queue's fetchers read when (None: all at once).
        self.turns = (QueueTurns(settings.queue_order) if settings.queue_order else None)
        for fetcher in self.fetchers if self.turns else ():
            self.turns.register(keys.queue_of(fetcher.queue), fetcher.queue)

    def _build_guards(self, settings: WorkerSettings) -> None:
        """The executor and what keeps messages safe: heartbeat, watchdog, reclaimer."""
        timeout = settings.reservation_timeout
        self.running = RunningSet(on_change=lambda: self.watchdog.wake())
        self.watchdog = TimeLimitWatchdog(self.running, settings.time_limit_grace,
                                          self._give_up)
        self.executor = Executor(self.broker, self.consumer, self.acker.add,
                                 requeue=self.acker.requeue, stats=self.monitor.recorder,
                                 running=self.running, reservation_timeout=timeout,
                                 record=self.acker.record, result_ttl=settings.result_ttl,
                                 workflow=self.acker.workflow)
        # `async def` tasks: awaited on one event loop beside the pool, holding no thread.
        self.coroutines = AsyncRunner(
            self.executor, settings.async_concurrency, room=self._room_changed,
            finished=lambda delivery: self._settled_elsewhere(delivery.shard,
                                                              delivery.stream_id))
        self.executor.coroutines = self.coroutines
        self.executor.free_slots = self.acker.release
        shortest = {shard: shortest_timeout(shard, timeout)
                    for shard in sharding.all_shards(self.queues)}
        floor = min(shortest.values(), default=timeout)
        self.heartbeat = Heartbeat(self.broker, self.consumer, self.running, timeout,
                                   self.status, held=self.held_messages, floor=floor,
                                   cancelled=self.executor.cancelled)
        self.reclaimer = Reclaimer(
            self.broker, self.consumer, sharding.all_shards(self.queues), self,
            reservation_timeout=timeout,
            dead_consumer_timeout=settings.dead_consumer_timeout, status=self.status,
            cancelled=self.executor.cancelled,
        )
        self.cancels = CancelListener(self.broker, self.consumer, self.executor.cancels)
        # A message that waited this long in the buffer is checked to be ours before it runs.
        self._recheck_after = {shard: seconds / 2 for shard, seconds in shortest.items()}

    def add_stream(self, stream: str, shard: str) -> None:
        """A priority level of `shard` came into use: its fetcher reads `stream` too, with
        the shard's reclaim and recheck timings."""
        self.reclaimer.add_stream(stream, shard)
        with self._lock:
            if shard in self._recheck_after:
                self._recheck_after.setdefault(stream, self._recheck_after[shard])

    # -- the buffer -----------------------------------------------------------------

    def limit(self) -> int:
        """Messages held at most: what the pool and the event loop run now, plus one batch
        waiting. A coroutine awaited on the loop holds no thread, so it does not count
        against the pool; those waiting for an async slot do."""
        return self.pool.size + self.coroutines.active + self.prefetch.size

    def _room_changed(self) -> None:
        """A coroutine took an async slot: the limit grew, a fetcher may read again."""
        with self._lock:
            self._cond.notify_all()

    def holds(self, queue: str, stream_id: str) -> bool:
        """True while `stream_id` is in this worker's buffer, running, or not acked yet."""
        with self._lock:
            return (queue, stream_id) in self._held or (queue, stream_id) in self.acker.unsent()

    def held_messages(self) -> list[tuple[str, str]]:
        """(queue, stream id) of every message fetched and not acked, for the heartbeat."""
        with self._lock:
            return list(self._held | self.acker.unsent())

    def low_water(self) -> int:
        """Room to wait for before the next read: a whole read, so reads stay batched
        (reading as soon as one slot frees makes every read carry one message; with room
        for a whole one, the running tasks keep the threads busy while it is in flight)."""
        return max(1, self.prefetch.size)

    def wait_for_room(self) -> int:
        if not self.returning.confirm():
            return 0  # declared lost: stopping
        with self._lock:
            self.prefetch.update(self.completed, clock.monotonic())
            # Afresh on each wake: another fetcher may shrink the read (and the limit);
            # nothing is fetched while finished tasks cannot be acked (acker.blocked), nor
            # while this child of `runtasks --processes` is paused for its replacement.
            while ((self.limit() - self.outstanding < min(self.low_water(), self.limit())
                    or self.acker.blocked or self.paused.is_set())
                   and not self.stopping.is_set()):
                self._cond.wait(0.5)
            return self.limit() - self.outstanding

    def generation(self) -> tuple[int, int, int]:
        """Changes whenever work may have appeared: a task finished, due ones were moved,
        or retries were put back."""
        return self.completed, self.promotions, self.requeues

    def _work_appeared(self) -> None:
        """The acker put retries back on their streams: fetchers must read again."""
        with self._lock:
            self.requeues += 1
            self._cond.notify_all()

    def wait_for_change(self, timeout: float) -> None:
        with self._lock:
            self._cond.wait(timeout)

    def accept(
        self, queue: str, entries: list[Entry], runs: dict[str, int] | None = None
    ) -> None:
        """Hand read (or reclaimed) entries to the pool, or keep them for requeue if stopping."""
        now = clock.monotonic()
        items = [Delivery(queue, stream_id, body, (runs or {}).get(stream_id), now)
                 for stream_id, body in entries]  # `queue`: the stream, a queue or a shard
        nbytes = sum(len(body) for _stream_id, body in entries if body)
        with self._lock:
            self.prefetch.read(len(items), nbytes)
            self.outstanding += len(items)
            self._held.update((queue, item.stream_id) for item in items)
            if self.stopping.is_set():
                self._leftovers.extend(items)
                return
        for item in items:
            self.pool.submit(item)

    def _run_item(self, item: Delivery) -> None:
        self.acker.wait_open(self.stopping)  # no task starts while acks are refused
        if self.stopping.is_set():
            with self._lock:
                self._leftovers.append(item)
            return
        finished = True
        try:
            if self.pauses.sends_back(item):  # its queue was paused since the read
                return
            if self.returning.confirm() and self._still_ours(item):
                finished = self.executor.handle(item)  # False: it goes on on the event loop
        finally:
            if finished:
                self._release(item.shard, item.stream_id)

    def _release(self, queue: str, stream_id: str) -> None:
        """The message is finished here (or given up on); counted once. The cancel book
        forgets it in `Executor.handle()`, or in `_settled_elsewhere`."""
        with self._lock:
            if (queue, stream_id) not in self._held:
                return
            self._held.discard((queue, stream_id))
            self.outstanding -= 1
            self.completed += 1
            # Wake the fetcher only once there is room for a batch read.
            if self.limit() - self.outstanding >= self.low_water() or not self.outstanding:
                self._cond.notify_all()

    def _settled_elsewhere(self, queue: str, stream_id: str) -> None:
        """A message settled outside `Executor.handle()`, on the event loop or by the
        watchdog: the cancel book forgets it (handle() does so for the others), then it
        is released."""
        self.executor.cancels.finished(queue, stream_id)
        self._release(queue, stream_id)

    def _still_ours(self, item: Delivery) -> bool:
        """A message that sat long in the buffer may have been reclaimed by another worker."""
        waited = clock.monotonic() - item.accepted
        if item.runs is not None or waited < self._recheck_after.get(item.shard, 0.0):
            return True  # fresh, or a reclaimed one, which the executor checks as it starts
        try:
            return not self.broker.hold(item.shard, self.consumer, [item.stream_id])
        except REDIS_DOWN:
            return True  # at least once: better run it twice than not at all

    def _give_up(self, attempt: Attempt) -> None:
        """A task thread is stuck past its time limit: replace it, fail the attempt. (A
        coroutine has no thread of its own to replace: only its result is ignored.)"""
        if not attempt.coroutine and self.end_process is not None and self.end_process(attempt):
            return  # its supervisor ends this process, settles the attempt (reclaim.py)
        if not attempt.coroutine:
            self.pool.abandon(attempt.thread)
            interrupt(attempt.thread)
        try:
            self.executor.give_up(attempt)
        finally:
            self._settled_elsewhere(attempt.shard, attempt.stream_id)

    # -- lifecycle ------------------------------------------------------------------

    def request_stop(self) -> None:
        """Begin a graceful stop (safe to call from a signal handler)."""
        self.stopping.set()

    def _leave(self, cause: str) -> None:
        """This worker came back after being declared lost: leave (`lost_workers.py`)."""
        with self._lock:
            held = len(self._held)
        logger.error("worker %s was declared lost while it was away (%s): it fetches and "
                     "starts nothing more, does not ack the %d message(s) it held (other "
                     "workers run them), and exits with code %d to be started again",
                     self.consumer, cause, held, LOST_EXIT)
        self.force_stop()

    def force_stop(self) -> None:
        """Stop waiting for running tasks (a second SIGINT)."""
        self.stopping.set()
        self.forced.set()

    def run(self) -> int:
        """Run until stopped; returns the process exit code."""
        logger.info("worker %s started: queues=%s concurrency=%d batch=%d", self.consumer,
                    ",".join(self.queues), self.settings.concurrency, self.settings.batch_size)
        name_connections(self.broker.client, connection_name(self.consumer))  # before threads
        self.returning.start()
        self.threads.watch([self.acker, self.monitor, self.heartbeat, self.cancels,
                            self.watchdog, self.coroutines.thread, self.coroutines.stall_watch,
                            self.pauses, *self.fetchers])  # the leader's: runner.py
        self.acker.start()
        self.coroutines.start()
        self.pool.resize(self.settings.concurrency)
        self.monitor.start()
        self._register_queues()
        self.heartbeat.start()
        self.cancels.start()
        self.watchdog.start()
        needed = len(self.fetchers) + self.settings.max_workers + OWN_CONNECTIONS
        make_room(self.broker.client, needed)
        self.pauses.poll()  # a pause set before this start holds from the first read
        self.pauses.start()
        for fetcher in self.fetchers:
            fetcher.start()
        if self.scheduling is not None:
            self.scheduling.start()
        while not self.stopping.is_set() and not self.threads.died():  # died(): logged
            if self.settings.burst and self._burst_done():
                logger.info("burst: every queue is empty, stopping")
                break
            self.stopping.wait(0.02 if self.settings.burst else 0.5)
        code = self._shutdown()
        if self.returning.cause is not None:
            return LOST_EXIT
        return THREAD_DIED_EXIT if self.threads.died() else code

    def _register_queues(self) -> None:
        try:
            self.beside.register_queues()
        except REDIS_DOWN as exc:
            logger.warning("could not record this worker's queues (%s)", exc)

    def _burst_done(self) -> bool:
        """Every stream was read empty since the last change, and nothing is due."""
        # The acker first: retries it sent changed the generation before it became idle.
        if not self.acker.idle():
            return False
        with self._lock:
            generation = self.generation()
            idle = self.outstanding == 0 and all(
                fetcher.idle_at == generation for fetcher in self.fetchers)
        if not idle:
            return False
        try:
            moved = self.beside.move_due()  # due delayed tasks, then the outbox's
        except REDIS_DOWN as exc:
            logger.error("burst: cannot move due delayed tasks (%s); retrying", exc)
            return False
        if moved:
            # Fetchers must read again after this: only a read that started later counts.
            with self._lock:
                self.promotions += 1
                self._cond.notify_all()
            return False
        return True

    def _shutdown(self) -> int:
        self.stopping.set()
        self.coroutines.stop_starting()
        started = clock.monotonic()
        self._log_stopping(self.settings.shutdown_timeout)
        if self.scheduling is not None:
            self.scheduling.stop()  # resigns the lease: another worker takes over at once
        stop_fetchers(self.fetchers, self.broker.client, connection_name(self.consumer),
                      self.settings.block_ms)
        remaining = max(0.0, self.settings.shutdown_timeout - (clock.monotonic() - started))
        finished = self._wait_for_pool(remaining)
        unfinished = self.pool.drain_inbox() + (self.pool.running_items() if not finished else [])
        remaining = max(0.0, self.settings.shutdown_timeout - (clock.monotonic() - started))
        finished = self.coroutines.drain(remaining, self.forced) and finished
        unfinished += self.coroutines.unfinished()
        with self._lock:
            unfinished += self._leftovers
            self._leftovers = []
        if not finished and self.returning.cause is None:
            self._log_given_up(self.settings.shutdown_timeout)
            for attempt in self.running.snapshot():  # their records say "queued" again
                if (write := requeued_write(attempt)) is not None:
                    self.acker.record(write)
        requeued = self._requeue(unfinished)
        if requeued:
            logger.info("put %d message(s) this worker held but did not finish back on their "
                        "queue", requeued)
        self.coroutines.stop()
        self.watchdog.stop()
        self.heartbeat.stop()
        self.cancels.stop()
        self.acker.stop()
        self.monitor.stop()
        self._leave_groups()
        logger.info("worker %s stopped", self.consumer)
        return 0

    def _leave_groups(self) -> None:
        """Remove this consumer from each group it read, where it holds nothing: a
        stopped worker is not listed as "no heartbeat" until a sweep removes it."""
        directory = self.broker.store.workers
        for stream in [stream for fetcher in self.fetchers for stream in fetcher.streams]:
            try:
                directory.forget_consumer(stream, self.broker.group, self.consumer)
            except REDIS_ERROR as exc:  # a sweep removes it later
                logger.debug("could not leave the group of %s (%s)", stream, exc)

    def _log_stopping(self, timeout: float) -> None:
        """Say what the shutdown waits for, so a slow stop can be told from a stalled one."""
        attempts = self.running.snapshot()
        with self._lock:
            buffered = max(0, self.outstanding - len(attempts))
        if not attempts:
            logger.info("stopping: no task running; %d fetched and not started go back to "
                        "their queue", buffered)
            return
        logger.info("stopping: waiting up to %gs for %d running task(s) (%s); %d fetched "
                    "and not started go back to their queue; a second SIGINT/SIGTERM stops "
                    "waiting", timeout, len(attempts), describe(attempts), buffered)

    def _log_given_up(self, timeout: float) -> None:
        attempts = self.running.snapshot()
        why = ("a second signal" if self.forced.is_set()
               else f"the shutdown timeout ({timeout:g}s)")
        logger.warning("stopping: gave up waiting at %s; %d task(s) still running (%s) are "
                       "put back on their queue and will run again, here or on another worker",
                       why, len(attempts), describe(attempts))

    def _wait_for_pool(self, timeout: float) -> bool:
        deadline = clock.monotonic() + timeout
        self.pool.resize(0)
        while clock.monotonic() < deadline and not self.forced.is_set():
            if self.pool.join(min(0.1, max(0.0, deadline - clock.monotonic()))):
                return True
        return self.pool.join(0)

    def _requeue(self, items: list[Delivery]) -> int:
        """Put held, unfinished messages back at the end of their stream, unchanged (but
        for a reclaimed one's runs that died, and the `ran_before` mark: `put_back`),
        through the acker (sent before it stops); returns how many go back. One that is
        no longer ours, or that cannot be sent, stays pending for reclaim."""
        requeued = 0
        for item in items:
            if item.body is not None:
                self.acker.requeue(item.shard, item.stream_id,
                                   put_back(item.body, item.runs))
                requeued += 1
        return requeued

