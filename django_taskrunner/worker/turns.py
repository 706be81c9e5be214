"""Which queue's fetchers may read: queue order (`runtasks -Q a -Q b`, `-Q a:3 -Q b:1`),
fair queues' turns, and paused queues (each below).

Without it every queue's fetcher reads side by side, as they always did. With an order:

- strict (no weights): a queue is read only while every queue named before it had
  nothing more to read at its fetchers' last reads (they found nothing, or less than
  they asked for); `a` before `b`, as Sidekiq's `-q a -q b`;
- weighted: a weighted round robin of reads (batches): each queue has as many reads
  per round as its weight; a round starts over when every queue with work left has used
  its reads. A queue with nothing to read gives its turn away.

Priorities (docs/priorities.md) order messages within a queue; this orders queues. Fair
queues take their turns by key before each read of a shard that has fair tasks (below).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from django_taskrunner.core import clock
from django_taskrunner.store import keys
from django_taskrunner.store.errors import REDIS_DOWN, REPLY_ERROR
from django_taskrunner.store.fair import Fair

if TYPE_CHECKING:
    from django_taskrunner.worker.fetcher import Delivery
    from django_taskrunner.worker.worker import Worker


class QueueTurns:
    """The shared state of one worker's fetchers: who read last, and what they found."""

    def __init__(self, order: Sequence[tuple[str, int]]) -> None:
        self.queues = [queue for queue, _weight in order]
        self.weights = {queue: weight for queue, weight in order}
        self.strict = all(weight == 0 for _queue, weight in order)
        self.credits = dict(self.weights)
        # Per fetcher (a stream name, by its queue): did its last read find nothing?
        self._idle: dict[str, dict[str, bool]] = {queue: {} for queue in self.queues}
        self._cond = threading.Condition()

    def _queue_idle(self, queue: str) -> bool:
        fetchers = self._idle.get(queue, {})
        return bool(fetchers) and all(fetchers.values())

    def may_read(self, queue: str) -> bool:
        """True when a fetcher of `queue` may read now (for a weighted one: takes no turn
        yet, `read()` does once the read found messages)."""
        with self._cond:
            if queue not in self.weights:
                return True
            if self.strict:
                before = self.queues[:self.queues.index(queue)]
                return all(self._queue_idle(other) for other in before)
            if self.credits[queue] > 0:
                return True
            if all(self.credits[other] <= 0 or self._queue_idle(other)
                   for other in self.queues if other != queue):
                self.credits = dict(self.weights)  # a new round
                return True
            return False

    def read(self, queue: str, fetcher: str, found: bool, drained: bool = False) -> None:
        """A fetcher of `queue` read: it found messages (a turn used) or none. `drained`:
        it got fewer than it asked for, so the stream is empty now, and in a strict order
        the queues after it may read at once."""
        with self._cond:
            if queue not in self.weights:
                return
            self._idle[queue][fetcher] = not found or (self.strict and drained)
            if found and not self.strict:
                self.credits[queue] -= 1
            self._cond.notify_all()

    def register(self, queue: str, fetcher: str) -> None:
        """A fetcher of `queue` exists: it counts as busy until its first read."""
        with self._cond:
            if queue in self._idle:
                self._idle[queue].setdefault(fetcher, False)

    def wait(self, timeout: float) -> None:
        """Until some fetcher reads (or `timeout`)."""
        with self._cond:
            self._cond.wait(timeout)


# The fetcher's side of fair queues: before each read of a shard that has fair tasks
# waiting, move about the reader's free room of them onto the shard's streams, in turns
# across keys (`store/fair.py`, `fair_feed.lua`). Turns are kept in Redis, so they are
# global across every worker and process, and the streams hold only what is about to run.
#
# A shard that never had a fair task costs one pipelined EXISTS of its rings when the
# reader starts and every `LOOK_EVERY` seconds after, as priority levels are found.

# Seconds between two looks for the fair rings of a shard's levels.
LOOK_EVERY = 2.0


class FairTurns:
    """The fair rings of one shard (a queue or one of its shards), fed before reads."""

    def __init__(self, fair: Fair, shard: str) -> None:
        self.fair = fair
        self.shard = shard
        self.rings: list[str] = []
        self._look_at = 0.0

    def feed(self, room: int, streams: list[str]) -> bool:
        """Move up to `room` waiting fair tasks onto their streams, highest level first;
        True when one went to a level stream not in `streams` (the reader then looks
        for its levels at once)."""
        now = clock.monotonic()
        if now >= self._look_at:
            self._look_at = now + LOOK_EVERY
            self.rings = self.fair.rings_in_use(self.shard)
        new_level = False
        for level in self.rings:
            if room <= 0:
                break
            moved = self.fair.feed(level, room)
            if moved:
                room -= moved
                new_level = new_level or level not in streams
            else:  # its ring emptied: look again at the next turn of LOOK_EVERY
                self.rings = [ring for ring in self.rings if ring != level]
        return new_level


# A worker's side of paused queues (`pause_queue`, docs/flow-control.md): it looks at
# the paused set every `PAUSE_POLL_S`, its fetchers read nothing of a paused queue, and a
# message of one read just before the pause was seen goes back on its stream unchanged
# instead of starting (through the acker, as at shutdown: nothing lost, no attempt
# counted). Running tasks, delayed moves and dispatch are not touched.
#
# Redis down: the last known set holds. The paused key of the wrong type: read as nothing
# paused (logged once), so a stray key never stops a worker.

logger = logging.getLogger(__name__)

PAUSE_POLL_S = 0.25  # a pause is seen within this (plus one round trip)


class PauseWatch(threading.Thread):
    """Keeps `paused` (queue names) up to date for the worker's fetchers and pool."""

    def __init__(self, worker: Worker) -> None:
        super().__init__(name="taskrunner-pauses", daemon=True)
        self.worker = worker
        self.store = worker.broker.store.pauses
        self.paused: frozenset[str] = frozenset()
        self._unreadable_logged = False

    def run(self) -> None:
        while not self.worker.stopping.wait(PAUSE_POLL_S):
            self.poll()

    def poll(self) -> None:
        """Read the paused set once; log what changed."""
        try:
            paused = frozenset(self.store.paused())
        except REDIS_DOWN:
            return
        except REPLY_ERROR as exc:
            if not self._unreadable_logged:
                logger.error("the paused queues cannot be read (%s): no queue is held", exc)
                self._unreadable_logged = True
            paused = frozenset()
        mine = set(self.worker.queues)
        for queue in sorted((paused - self.paused) & mine):
            logger.info("queue %s is paused: no new task of it starts here", queue)
        for queue in sorted((self.paused - paused) & mine):
            logger.info("queue %s is resumed", queue)
        self.paused = paused

    def holds(self, stream: str) -> bool:
        """Whether the queue of `stream` (a queue, shard or level) is paused."""
        return keys.queue_of(stream) in self.paused

    def sends_back(self, item: Delivery) -> bool:
        """A fetched message of a paused queue: back on its stream, unchanged (True);
        False when it may start."""
        if item.body is None or not self.holds(item.shard):
            return False
        self.worker.acker.requeue(item.shard, item.stream_id, item.body)
        return True
