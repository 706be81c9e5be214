"""Fetchers: one thread per stream that reads new messages into the worker's buffer, as
`Delivery` objects, each read as large as its `Prefetch` says (below).

A shard (or queue) whose messages use priorities has a stream per level in use
(`store/keys.py`, `level_name`): its one fetcher reads them highest first, a batch split
across the levels (docs/priorities.md). It looks for levels when it starts and every
`LEVELS_EVERY` seconds; a shard without them reads its one stream as before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from django_taskrunner.core import clock
from django_taskrunner.store import keys
from django_taskrunner.store.connection import unblock_reads
from django_taskrunner.worker.outage import redis_call
from django_taskrunner.worker.turns import FairTurns

if TYPE_CHECKING:
    from django_taskrunner.worker.worker import Worker


T = TypeVar("T")

# Seconds between two looks for new priority levels of a fetcher's shard (one pipelined
# EXISTS of each level's stream and delayed set).
LEVELS_EVERY = 2.0
# Seconds a fetcher of a paused queue waits between two looks at the pause.
PAUSED_WAIT_S = 0.1


class Fetcher(threading.Thread):
    """Reads one stream (a queue, or one shard of it) into the worker's buffer while there
    is room; `queue` is then the shard name, which the executor and acker use as is.
    With priority levels, `streams` holds the shard's streams, highest first."""

    def __init__(self, worker: Worker, queue: str) -> None:
        super().__init__(name=f"taskrunner-fetch-{queue}", daemon=True)
        self.worker = worker
        self.queue = queue
        self.streams = [queue]
        self.queue_name = keys.queue_of(queue)
        self.fair = FairTurns(worker.broker.store.fair, queue)
        self._levels_at = 0.0
        # Burst mode: the worker's generation seen when a read found the stream empty.
        self.idle_at: tuple[int, int, int] | None = None
        # Whether the last read got all it asked for (more may wait on the stream).
        self.filled = False

    def run(self) -> None:
        worker, broker = self.worker, self.worker.broker
        self._with_retries(lambda: broker.ensure_group(self.queue))
        self._take_back_own(self.queue)
        reclaimer = worker.reclaimer
        while not worker.stopping.is_set():
            if worker.pauses.holds(self.queue):  # pause_queue: read nothing, look again soon
                self.idle_at = worker.generation()  # burst mode: a paused queue is done
                worker.stopping.wait(PAUSED_WAIT_S)
                continue
            room = worker.wait_for_room()
            self._look_for_levels()  # just before reading: what came in while it waited
            for stream in self.streams:  # messages of dead workers go before new ones
                if room > 0:
                    room -= reclaimer.reclaim_due(stream, room)
            if room <= 0:
                continue
            turns = worker.turns
            if turns is not None and not turns.may_read(self.queue_name):
                turns.wait(0.05)  # an earlier queue (or one with turns left) reads first
                continue
            generation = worker.generation()
            count = min(room, worker.prefetch.size)
            self._feed_fair(count)
            block = None if worker.settings.burst else worker.settings.block_ms
            if turns is not None and turns.strict and self.filled:
                # Later queues wait for this one to run dry: after a full read, look
                # without blocking, so that an empty stream lets them read at once
                # instead of after BLOCK_MS.
                block = None
            if len(self.streams) > 1:
                found = self._read_levels(count, block, generation)
                if turns is not None and found is not None:
                    turns.read(self.queue_name, self.queue, found, drained=not self.filled)
                continue
            self._read_stream(count, block, generation)

    def _read_stream(self, count: int, block: int | None,
                     generation: tuple[int, int, int]) -> None:
        """One read of the shard's one stream, handed to the pool."""
        worker, turns = self.worker, self.worker.turns
        read = self._with_retries(
            lambda: worker.broker.read_checked(self.queue, worker.consumer, count, block))
        entries = None if read is None else read[0]
        self.filled = bool(entries) and len(entries) >= count
        if read is not None:  # the ids cancelled on this stream, as of this read
            worker.executor.cancelled[self.queue] = read[1]
            if turns is not None:
                turns.read(self.queue_name, self.queue, bool(entries), drained=not self.filled)
        if entries:
            self.idle_at = None
            worker.accept(self.queue, entries)
            # Let a pool thread take the batch before this one reads again: otherwise
            # it waits for the GIL until this loop blocks on its next read, which
            # costs an idle task about 0.1 ms of latency.
            time.sleep(0)
        elif entries is not None and worker.settings.burst:
            self.idle_at = generation
            worker.wait_for_change(0.05)

    def _feed_fair(self, count: int) -> None:
        """Fair queues: up to `count` waiting fair tasks onto this shard's streams, in
        turns across keys, just before the read (worker/turns.py)."""
        if self._with_retries(lambda: self.fair.feed(count, self.streams)):
            self._levels_at = 0.0  # a fair task went to a level not read yet: look now
            self._look_for_levels()

    def _take_back_own(self, stream: str) -> None:
        """Messages this consumer name held before a restart come first."""
        worker = self.worker
        while not worker.stopping.is_set() and self._with_retries(
                lambda: worker.reclaimer.take_back_own(stream, worker.wait_for_room())):
            pass

    def _look_for_levels(self) -> None:
        """Add the shard's priority levels that came into use (at most every LEVELS_EVERY)."""
        now = clock.monotonic()
        if now < self._levels_at:
            return
        self._levels_at = now + LEVELS_EVERY
        found = self._with_retries(lambda: self.worker.broker.levels_in_use([self.queue]))
        if found is None:
            return
        streams = found[self.queue]
        for stream in streams:
            if stream not in self.streams:
                self._with_retries(lambda: self.worker.broker.ensure_group(stream))  # noqa: B023
                self.worker.add_stream(stream, self.queue)
                self._take_back_own(stream)
        self.streams = streams

    def _read_levels(self, count: int, block: int | None,
                     generation: tuple[int, int, int]) -> bool | None:
        """Non-blocking reads level by level, highest first, until `count` is read; when
        every level is empty, one read blocking on all of them (up to one entry each).
        Whether it read anything (None: stopping)."""
        worker, broker = self.worker, self.worker.broker
        read_any = False
        for stream in self.streams:
            if count <= 0:
                break
            read = self._with_retries(
                lambda: broker.read_checked(stream, worker.consumer, count, None))  # noqa: B023
            if read is None:
                return None
            worker.executor.cancelled[stream] = read[1]
            if read[0]:
                read_any = True
                count -= len(read[0])
                worker.accept(stream, read[0])
        self.filled = read_any and count <= 0
        if read_any:
            self.idle_at = None
            return True
        if worker.settings.burst:
            self.idle_at = generation
            worker.wait_for_change(0.05)
            return False
        if block is None:  # asked not to block (see run): every level is empty now
            return False
        many = self._with_retries(
            lambda: broker.read_checked_many(self.streams, worker.consumer, 1, block))
        if many is None:
            return None
        for stream in self.streams:
            worker.executor.cancelled[stream] = many[1]
        for stream in self.streams:  # highest first
            if many[0].get(stream):
                self.idle_at = None
                worker.accept(stream, many[0][stream])
        return any(many[0].values())

    def _with_retries(self, call: Callable[[], T]) -> T | None:
        """Run `call`, retrying with capped backoff while Redis is down; None if stopping."""
        stopping = self.worker.stopping
        return redis_call(call, status=self.worker.status, doing=f"reading queue {self.queue}",
                          wait=lambda seconds, _failures: stopping.wait(seconds))


# While fetchers are still reading at stop, their blocked reads are looked for and woken
# this often: a fetcher between two reads when the stop began may block just after a look.
UNBLOCK_EVERY_S = 0.1


def stop_fetchers(fetchers: list[Fetcher], client: Any, name: str, block_ms: int) -> None:
    """Wait for the fetchers to end (the worker is stopping), waking their blocked reads
    (`store/connection.py`) instead of waiting up to `BLOCK_MS` for each; where that is not
    possible (a server that refuses it), within `BLOCK_MS` and a second."""
    deadline = clock.monotonic() + block_ms / 1000 + 1
    alive = [fetcher for fetcher in fetchers if fetcher.is_alive()]
    waking = True
    while alive and clock.monotonic() < deadline:
        waking = waking and unblock_reads(client, name) is not None  # once refused: joins
        for fetcher in alive:
            fetcher.join(max(0.0, min(UNBLOCK_EVERY_S, deadline - clock.monotonic())))
        alive = [fetcher for fetcher in alive if fetcher.is_alive()]


# `Delivery`: one stream entry as the worker holds it, from its read to its ack.
#
# The shard (the stream it was read from) travels here, beside the message, so that
# `TaskMessage.queue` always names the queue: the ack, the retry, the heartbeat and the
# lock release use `shard`; figures, failed rows and the task's context use `queue`.

@dataclass(slots=True)
class Delivery:
    """An entry read (or reclaimed) from one stream, not yet finished (not frozen: one is
    built for every message read, and a frozen dataclass takes four times as long to
    build; nothing changes one after it is built).
    """

    shard: str  # the stream: a queue, or one shard of it ("emails#2", see core/sharding.py)
    stream_id: str
    body: bytes | None  # None: deleted from the stream while pending
    runs: int | None = None  # delivery counter of a reclaimed entry; None when fresh
    accepted: float = 0.0  # monotonic time it entered the worker's buffer

    @property
    def queue(self) -> str:
        """The queue the shard belongs to (the shard itself for a queue not split)."""
        return keys.queue_of(self.shard)


# How many messages one read asks for: `BATCH_SIZE`, grown while tasks are short.
#
# A worker holds at most its threads' tasks plus one read's worth of messages (the bounded
# prefetch, docs/design.md). A small read keeps a busy worker from sitting on messages an
# idle one could run; but with short tasks every read (and every wake-up of the fetcher)
# then carries a few messages, and that hand-off is most of a short task's cost. So the
# read grows to about `PREFETCH_MS` of work at the rate the pool finishes tasks now, at
# most `PREFETCH_MAX` messages: a flood of 1 ms tasks reads 100 at a time, while tasks of
# a second or more still read `BATCH_SIZE`. What a worker sits on is thus bounded by time
# as well as by count, and by bytes: a read grows only while its messages, at the size
# the last reads' were, hold at most `PREFETCH_BYTES` (large payloads keep `BATCH_SIZE`).
# `PREFETCH_MS = 0` keeps every read at `BATCH_SIZE`.

# The most messages one read may grow to (a larger BATCH_SIZE is kept as it is), and
# the most bytes of messages it may grow to hold.
PREFETCH_MAX = 100
PREFETCH_BYTES = 16 * 1024 * 1024
# Seconds between two samples of the finishing rate: shorter gaps measure noise.
SAMPLE_S = 0.010


class Prefetch:
    """The read size of one worker, from how many tasks it finished lately.

    Not thread-safe: the worker calls `update()` under its buffer's lock.
    """

    def __init__(self, batch_size: int, prefetch_ms: int) -> None:
        self.floor = batch_size
        self.window_s = prefetch_ms / 1000
        self.size = batch_size  # what a read asks for now
        self.rate = 0.0  # tasks finished per second, smoothed over the last samples
        self._sampled_at: float | None = None
        self._sampled_count = 0
        self.message_bytes = 0.0  # the size of a message lately, smoothed over the reads

    def read(self, count: int, nbytes: int) -> None:
        """A read brought `count` messages of `nbytes` in all."""
        if count:
            size = nbytes / count
            self.message_bytes = size if not self.message_bytes else (
                self.message_bytes + size) / 2

    def update(self, completed: int, now: float) -> int:
        """The read size, given the worker's count of finished tasks at monotonic `now`."""
        if self.window_s <= 0:
            return self.size
        if self._sampled_at is None:
            self._sampled_at, self._sampled_count = now, completed
            return self.size
        elapsed = now - self._sampled_at
        if elapsed < SAMPLE_S:
            return self.size
        current = (completed - self._sampled_count) / elapsed
        # Half the last sample, half the past: a burst that ends shrinks the read within
        # a few samples, a single quiet gap does not throw away what was learnt.
        self.rate = (self.rate + current) / 2
        self._sampled_at, self._sampled_count = now, completed
        grown = min(round(self.rate * self.window_s), PREFETCH_MAX)
        if self.message_bytes:
            grown = min(grown, int(PREFETCH_BYTES // self.message_bytes))
        self.size = max(self.floor, grown)
        return self.size
