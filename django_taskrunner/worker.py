"""The worker: fetchers read streams into a bounded buffer, a pool runs the tasks,
an acker acks finished ones in batches. No argparse here; `runtasks` builds a Worker.

Shutdown (`request_stop()`, from SIGTERM/SIGINT): fetchers stop reading, running tasks
get `shutdown_timeout` seconds to finish, and every message this worker holds but did
not finish is put back on its stream for another worker. Nothing is lost.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from django_taskrunner import clock
from django_taskrunner.broker import Broker, Entry
from django_taskrunner.executor import Executor
from django_taskrunner.pool import Pool

logger = logging.getLogger(__name__)

REDIS_DOWN = (RedisConnectionError, RedisTimeoutError)
RETRY_CAP_SECONDS = 5.0
# Acks wait at most this long (or until this many finished) to share a round trip.
ACK_LINGER_S = 0.010
ACK_BATCH = 100


def default_consumer_name() -> str:
    """Unique per process: host, pid and a random suffix."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class WorkItem:
    queue: str
    stream_id: str
    body: bytes | None


class Acker(threading.Thread):
    """Acks finished messages in batches: all that finished meanwhile, one round trip.

    The first ack of a batch wakes the acker, which then lingers `ACK_LINGER_S` to
    collect more (or until `ACK_BATCH` wait): one round trip and one thread switch for
    many tasks instead of one per task, for at most 10 ms of delay.
    """

    def __init__(self, broker: Broker) -> None:
        super().__init__(name="taskrunner-acker", daemon=True)
        self.broker = broker
        self._waiting: dict[str, list[str]] = defaultdict(list)
        self._count = 0
        self._cond = threading.Condition()
        self._stopping = False

    def add(self, queue: str, stream_id: str) -> None:
        with self._cond:
            self._waiting[queue].append(stream_id)
            self._count += 1
            if self._count == 1 or self._count == ACK_BATCH:
                self._cond.notify()

    def _take(self) -> dict[str, list[str]] | None:
        """The next batch to ack; None once stopping with nothing left."""
        with self._cond:
            while not self._waiting and not self._stopping:
                self._cond.wait()
            if not self._waiting and self._stopping:
                return None
            if self._count < ACK_BATCH and not self._stopping:
                self._cond.wait(ACK_LINGER_S)
            batch, self._waiting, self._count = self._waiting, defaultdict(list), 0
            return batch

    def run(self) -> None:
        failures = 0
        while True:
            batch = self._take()
            if batch is None:
                return
            try:
                self.flush(batch)
                failures = 0
            except REDIS_DOWN as exc:
                failures += 1
                if failures == 1:
                    logger.error("cannot ack, Redis is unreachable (%s); retrying", exc)
                with self._cond:
                    for queue, ids in batch.items():
                        self._waiting[queue][:0] = ids
                        self._count += len(ids)
                    self._cond.wait(min(RETRY_CAP_SECONDS, 0.1 * 2**failures))
                    if self._stopping and failures > 3:
                        logger.error("giving up on %d acks at exit; those tasks will be "
                                     "delivered again", sum(map(len, self._waiting.values())))
                        return

    def flush(self, batch: dict[str, list[str]]) -> None:
        pipe = self.broker.client.pipeline(transaction=False)
        for queue, ids in batch.items():
            self.broker.ack(queue, ids, pipe=pipe)
        pipe.execute()

    def stop(self) -> None:
        """Ack what is waiting, then end."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self.join()


class Fetcher(threading.Thread):
    """Reads one queue's stream into the worker's buffer while there is room."""

    def __init__(self, worker: Worker, queue: str) -> None:
        super().__init__(name=f"taskrunner-fetch-{queue}", daemon=True)
        self.worker = worker
        self.queue = queue
        # Burst mode: the completion count seen when a read found the stream empty.
        self.idle_at: int | None = None

    def run(self) -> None:
        worker, broker = self.worker, self.worker.broker
        self._with_retries(lambda: broker.ensure_group(self.queue))
        # Messages this consumer name held before a restart come first.
        while not worker.stopping.is_set():
            entries = self._with_retries(
                lambda: broker.read_own_pending(self.queue, worker.consumer, worker.batch_size))
            if not entries:
                break
            worker.accept(self.queue, entries)
        while not worker.stopping.is_set():
            room = worker.wait_for_room()
            if room <= 0:
                continue
            generation = worker.completed
            block = None if worker.burst else worker.block_ms
            entries = self._with_retries(
                lambda n=min(room, worker.batch_size): broker.read(self.queue, worker.consumer,
                                                                    n, block))
            if entries:
                self.idle_at = None
                worker.accept(self.queue, entries)
            elif entries is not None and worker.burst:
                self.idle_at = generation
                worker.wait_for_change(0.05)

    def _with_retries(self, call):  # type: ignore[no-untyped-def]
        """Run `call`, retrying with capped backoff while Redis is down; None if stopping."""
        failures = 0
        while True:
            try:
                result = call()
            except REDIS_DOWN as exc:
                failures += 1
                if failures == 1:
                    logger.error("queue %s: Redis is unreachable (%s); retrying", self.queue, exc)
                if self.worker.stopping.wait(min(RETRY_CAP_SECONDS, 0.1 * 2**failures)):
                    return None
                continue
            if failures:
                logger.warning("queue %s: Redis is back after %d failed attempts", self.queue,
                               failures)
            return result


class Worker:
    """Runs tasks from `queues` until stopped (or, in burst mode, until all are empty)."""

    def __init__(
        self, broker: Broker, queues: Sequence[str], *, concurrency: int, batch_size: int,
        block_ms: int, shutdown_timeout: float, consumer: str | None = None, burst: bool = False,
    ) -> None:
        self.broker = broker
        self.queues = list(dict.fromkeys(queues))
        self.batch_size = batch_size
        self.block_ms = block_ms
        self.shutdown_timeout = shutdown_timeout
        self.consumer = consumer or default_consumer_name()
        self.burst = burst
        self.stopping = threading.Event()
        self.forced = threading.Event()
        self.acker = Acker(broker)
        self.executor = Executor(broker, self.consumer, self.acker.add)
        self.pool = Pool(0, self._run_item)
        self._initial_size = concurrency
        self._cond = threading.Condition()
        self.outstanding = 0  # fetched and not yet finished
        self.completed = 0  # finished so far; tells burst mode that work may have appeared
        self._leftovers: list[WorkItem] = []
        self.fetchers = [Fetcher(self, queue) for queue in self.queues]

    # -- the buffer -----------------------------------------------------------------

    def limit(self) -> int:
        """Messages held at most: what the pool runs now plus one batch waiting."""
        return self.pool.size + self.batch_size

    def low_water(self) -> int:
        """Room to wait for before the next read: a whole batch, so reads stay batched.

        Reading as soon as one slot frees makes every read (and every wake-up of the
        fetcher) carry one message. With room for a batch, only the running tasks are
        left, and they keep the threads busy while the read is in flight.
        """
        return max(1, self.batch_size)

    def wait_for_room(self) -> int:
        with self._cond:
            needed = min(self.low_water(), self.limit())
            while self.limit() - self.outstanding < needed and not self.stopping.is_set():
                self._cond.wait(0.5)
            return self.limit() - self.outstanding

    def wait_for_change(self, timeout: float) -> None:
        with self._cond:
            self._cond.wait(timeout)

    def accept(self, queue: str, entries: list[Entry]) -> None:
        """Hand read entries to the pool (or keep them for requeue when stopping)."""
        items = [WorkItem(queue, stream_id, body) for stream_id, body in entries]
        with self._cond:
            self.outstanding += len(items)
            if self.stopping.is_set():
                self._leftovers.extend(items)
                return
        for item in items:
            self.pool.submit(item)

    def _run_item(self, item: WorkItem) -> None:
        if self.stopping.is_set():
            with self._cond:
                self._leftovers.append(item)
            return
        try:
            self.executor.handle(item.queue, item.stream_id, item.body)
        finally:
            with self._cond:
                self.outstanding -= 1
                self.completed += 1
                # Wake the fetcher only once there is room for a batch read.
                if self.limit() - self.outstanding >= self.low_water() or not self.outstanding:
                    self._cond.notify_all()

    # -- lifecycle ------------------------------------------------------------------

    def request_stop(self) -> None:
        """Begin a graceful stop (safe to call from a signal handler)."""
        self.stopping.set()

    def force_stop(self) -> None:
        """Stop waiting for running tasks (a second SIGINT)."""
        self.stopping.set()
        self.forced.set()

    def run(self) -> int:
        """Run until stopped; returns the process exit code."""
        logger.info("worker %s started: queues=%s concurrency=%d batch=%d", self.consumer,
                    ",".join(self.queues), self._initial_size, self.batch_size)
        self.acker.start()
        self.pool.resize(self._initial_size)
        for fetcher in self.fetchers:
            fetcher.start()
        while not self.stopping.is_set():
            if self.burst and self._burst_done():
                logger.info("burst: every queue is empty, stopping")
                break
            self.stopping.wait(0.02 if self.burst else 0.5)
        return self._shutdown()

    def _burst_done(self) -> bool:
        with self._cond:
            return self.outstanding == 0 and all(
                fetcher.idle_at == self.completed for fetcher in self.fetchers)

    def _shutdown(self) -> int:
        self.stopping.set()
        started = clock.monotonic()
        for fetcher in self.fetchers:
            fetcher.join(self.block_ms / 1000 + 1)
        remaining = max(0.0, self.shutdown_timeout - (clock.monotonic() - started))
        finished = self._wait_for_pool(remaining)
        unfinished = self.pool.drain_inbox() + (self.pool.running_items() if not finished else [])
        with self._cond:
            unfinished += self._leftovers
            self._leftovers = []
        if not finished:
            logger.warning("shutdown timeout: %d running task(s) did not finish; they are put "
                           "back on their queue", len(self.pool.running_items()))
        self._requeue(unfinished)
        self.acker.stop()
        logger.info("worker %s stopped", self.consumer)
        return 0

    def _wait_for_pool(self, timeout: float) -> bool:
        deadline = clock.monotonic() + timeout
        self.pool.resize(0)
        while clock.monotonic() < deadline and not self.forced.is_set():
            if self.pool.join(min(0.1, max(0.0, deadline - clock.monotonic()))):
                return True
        return self.pool.join(0)

    def _requeue(self, items: list[WorkItem]) -> None:
        """Put held, unfinished messages back at the end of their stream, unchanged."""
        for item in items:
            if item.body is None:
                continue
            try:
                self.broker.requeue(item.queue, self.consumer, item.stream_id, item.body)
            except REDIS_DOWN as exc:
                logger.error("could not requeue %s (%s); it stays pending for reclaim",
                             item.stream_id, exc)
