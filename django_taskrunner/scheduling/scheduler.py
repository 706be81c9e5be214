"""The scheduler: moves due messages from each queue's delayed set onto its stream and
fires periodic tasks, in its own thread, in the one worker that leads (`election.py`);
it also forgets known queues nobody uses any more (below).

It sleeps until the earliest due time it knows of, not on a fixed cycle. A dispatch
whose entry is due before every other of its queue PUBLISHes the due time on the
queue's wake channel in the same script as its ZADD; the scheduler is subscribed and
wakes for it. Every `RESYNC_SECONDS` it rereads every delayed set anyway, in case a
wake-up was lost (a dropped connection).

Every move is one `promote_due.lua` call on a small batch: atomic, so two schedulers
(a lease hand-over) never move a message twice, and short, so Redis and the worker's
other threads are never held up, even when 100,000 messages fall due at once. A turn
moves one batch of each due set and then reads the wake-ups: a backlog falling due
holds up another queue's due tasks by about a batch, not by the whole move.

A delayed set (or its stream) that Redis refuses to serve (a key of another type, a
script error) stops only its own moves: the error is logged once with the set's key, the
set is tried again every `BROKEN_SET_RETRY_MS`, and every other set is moved as usual.
A body that is not a message is moved all the same; the worker fails it clearly.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from django_taskrunner.conf import get_settings
from django_taskrunner.core import clock, sharding
from django_taskrunner.scheduling.periodic import RELOAD_SECONDS, PeriodicRunner
from django_taskrunner.store import keys
from django_taskrunner.store.connection import WakeSubscription
from django_taskrunner.store.errors import REDIS_DOWN, REDIS_ERROR
from django_taskrunner.store.schedule import ScheduleStore
from django_taskrunner.store.streams import Broker

logger = logging.getLogger(__name__)

PROMOTE_BATCH = 500  # messages per script call: ~1 ms of Redis time
BATCHES_PER_TURN = 1  # of each due set; then the other sets, the wake-ups, periodic tasks
RESYNC_SECONDS = 5.0
WAIT_SLICE_SECONDS = 0.25  # how quickly stop() is noticed while idle
WAKE_READS_WHEN_DUE = 100  # wake-ups read between two turns while a set is due, at most
NEVER = 2**62
BROKEN_SET_RETRY_MS = 5_000  # a delayed set Redis refuses is tried again this often


def promote_all_due(broker: Broker, queues: Iterable[str], now_ms: int,
                    batch: int = PROMOTE_BATCH) -> int:
    """Move every message due at `now_ms` onto its stream; returns how many moved.

    Used by burst mode, which must run what is due before deciding queues are empty.
    """
    total = 0
    levels = broker.levels_in_use(sharding.all_shards(queues))
    for shard in [stream for streams in levels.values() for stream in streams]:
        try:
            while True:
                moved, _ = broker.promote_due(shard, now_ms, batch)
                total += moved
                if moved < batch:
                    break
        except REDIS_DOWN:
            raise
        except REDIS_ERROR as error:  # one broken set: the others are moved all the same
            logger.error("cannot move the delayed set %s (%s); its tasks wait",
                         keys.delayed_key(broker.prefix, shard), error)
    return total


def register_queues(broker: Broker, queues: Iterable[str]) -> None:
    """Record the queues a worker consumes, so the leader promotes their delayed sets."""
    broker.store.schedule.add_known_queues(list(queues), clock.now_ms())


def _app_now_ms() -> int:
    return clock.now_ms()


class Scheduler(threading.Thread):
    """Promotes due delayed messages and fires periodic tasks until `stop()`."""

    def __init__(
        self, broker: Broker, queues: Iterable[str], *, periodic: PeriodicRunner | None = None,
        batch: int = PROMOTE_BATCH, now_ms: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(name="taskrunner-scheduler", daemon=True)
        self.broker = broker
        self.store = broker.store.schedule
        self.queues = set(queues)
        self.own_queues = frozenset(self.queues)  # never dropped by `forget_idle_queues`
        self._forget_at = 0
        self.periodic = periodic
        self.batch = batch
        # Looked up at each call, so a test that moves the app's clock moves the scheduler's.
        self.now_ms = now_ms if now_ms is not None else _app_now_ms
        self.moved = 0  # messages promoted so far
        self._stopping = threading.Event()
        # Per delayed set: a queue's, or each of its shards' when it is split.
        self._next_due: dict[str, int] = {}  # queue or shard -> earliest due time known (ms)
        self._channels: dict[str, str] = {}  # wake channel -> queue or shard
        self._periodic_channel = keys.periodic_channel(broker.prefix)
        self._resync_at = 0
        self._reload_at = 0
        self._reload = True
        self._broken: set[str] = set()  # sets whose error was logged, until they work

    def stop(self, timeout: float = 10.0) -> None:
        """Finish the current batch and end the thread."""
        self._stopping.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)

    def run(self) -> None:
        failures = 0
        pubsub: WakeSubscription | None = None
        while not self._stopping.is_set():
            try:
                if pubsub is None:
                    pubsub = self.store.subscription()
                    self._channels = {}
                    self._subscribe(pubsub, [self._periodic_channel])
                self.turn(pubsub)
                failures = 0
            except REDIS_DOWN as exc:
                failures += 1
                if failures == 1:
                    logger.error("scheduler: Redis is unreachable (%s); retrying", exc)
                _close(pubsub)
                pubsub = None
                self._resync_at = 0
                self._stopping.wait(min(5.0, 0.1 * 2**failures))
            except Exception:
                logger.exception("scheduler: unexpected error; going on in 1 s")
                self._resync_at = 0
                self._stopping.wait(1.0)
        _close(pubsub)

    def turn(self, pubsub: WakeSubscription) -> None:
        """Promote what is due, fire periodic tasks, then sleep until the next due time."""
        now = self.now_ms()
        if now >= self._resync_at:
            self._resync(pubsub, now)
        if self.periodic is not None and (self._reload or now >= self._reload_at):
            self.periodic.load(now)
            self._reload, self._reload_at = False, now + round(RELOAD_SECONDS * 1000)
        wake_at = min(self.promote(now), self._resync_at)
        if self.periodic is not None:
            next_periodic = self.periodic.run_due(self.now_ms())
            wake_at = min(wake_at, self._reload_at, next_periodic or NEVER)
        self.wait(pubsub, wake_at)

    def promote(self, now: int) -> int:
        """Move due messages of every delayed set due at `now`; returns the next due time."""
        for shard, due in list(self._next_due.items()):
            if due > now or self._stopping.is_set():
                continue
            try:
                next_ms = self._promote_set(shard, now)
            except REDIS_DOWN:
                raise
            except REDIS_ERROR as error:
                self._set_broken(shard, error)
                next_ms = now + BROKEN_SET_RETRY_MS
            self._next_due[shard] = NEVER if next_ms is None else next_ms
        return min(self._next_due.values(), default=NEVER)

    def _promote_set(self, shard: str, now: int) -> int | None:
        """Up to `BATCHES_PER_TURN` batches of one set; the earliest due time left."""
        next_ms: int | None = None
        for _ in range(BATCHES_PER_TURN):
            moved, next_ms = self.broker.promote_due(shard, now, self.batch)
            self.moved += moved
            if moved < self.batch:
                break
        if shard in self._broken:
            self._broken.discard(shard)
            logger.warning("scheduler: the delayed set of %s is moved again", shard)
        return next_ms

    def _set_broken(self, what: str, error: Exception) -> None:
        """Log (once until it works again) that Redis refuses one delayed set's move (or
        the known queues' keys)."""
        if what in self._broken:
            return
        self._broken.add(what)
        if what == "the known queues":
            logger.error("scheduler: cannot read the known queues (%s, keys %s and %s); "
                         "going on with the queues known so far", error,
                         keys.queues_seen_key(self.broker.prefix),
                         keys.known_queues_key(self.broker.prefix))
            return
        logger.error("scheduler: cannot move the delayed set %s (%s); its tasks wait, it is "
                     "tried again every %d ms, other queues go on",
                     keys.delayed_key(self.broker.prefix, what), error, BROKEN_SET_RETRY_MS)

    def wait(self, pubsub: WakeSubscription, wake_at: int) -> None:
        """Sleep until `wake_at` (ms), or until told of an earlier due time.

        The wake-ups already received are read even when `wake_at` has passed: while one
        set is still due (a long move), another queue's new earliest task is learnt at
        the next turn, not after the move or at the next resync. Then at most
        `WAKE_READS_WHEN_DUE` of them, so a steady stream of wake-ups cannot hold up the
        move itself.
        """
        read_when_due = 0
        while not self._stopping.is_set():
            remaining = wake_at - self.now_ms()
            if remaining <= 0:
                read_when_due += 1
                if read_when_due > WAKE_READS_WHEN_DUE:
                    return
            timeout = min(max(remaining, 0) / 1000, WAIT_SLICE_SECONDS)
            message = pubsub.next_message(timeout=timeout)
            if message is None:
                if remaining <= 0:
                    return
                continue
            channel, data = message
            if channel == self._periodic_channel:
                self._reload = True
                return
            shard = self._channels.get(channel)
            if shard is None:
                continue
            try:
                due = int(data)
            except (TypeError, ValueError):
                continue  # not ours: wake-ups carry a due time in ms
            self._next_due[shard] = min(self._next_due.get(shard, NEVER), due)
            wake_at = min(wake_at, due)

    def _resync(self, pubsub: WakeSubscription, now: int) -> None:
        """Learn new queues (forget idle ones), subscribe to their wake channels, and
        recheck every set."""
        self._learn_queues(now)
        shards = sharding.all_shards(sorted(self.queues))
        # Each priority level of a shard has a delayed set and a wake channel of its own.
        levels = [keys.level_name(shard, level) for shard in shards for level in range(10)]
        new = {keys.wake_channel(self.broker.prefix, s): s for s in levels
               if keys.wake_channel(self.broker.prefix, s) not in self._channels}
        if new:
            # Subscribed before the sets are read, so no wake-up can fall in between.
            self._subscribe(pubsub, list(new))
            self._channels.update(new)
        in_use = self.broker.levels_in_use(shards)
        self._next_due = {stream: 0 for streams in in_use.values() for stream in streams}
        self._resync_at = now + round(RESYNC_SECONDS * 1000)

    def _learn_queues(self, now: int) -> None:
        """Add the known queues, forget idle ones; when Redis refuses the queue keys
        (another type), go on with the queues known so far (logged once)."""
        try:
            if now >= self._forget_at:
                self._forget_at = now + CHECK_EVERY_MS
                self.queues -= set(forget_idle_queues(self.store, now)) - self.own_queues
            self.queues |= self.store.known_queues()
        except REDIS_DOWN:
            raise
        except REDIS_ERROR as error:
            self._set_broken("the known queues", error)
            return
        if "the known queues" in self._broken:
            self._broken.discard("the known queues")
            logger.warning("scheduler: the known queues can be read again")

    @staticmethod
    def _subscribe(pubsub: WakeSubscription, channels: list[str]) -> None:
        """SUBSCRIBE and wait (up to 5 s) for Redis to confirm each channel."""
        pubsub.subscribe(channels, timeout=5.0, monotonic=clock.monotonic)


def _close(pubsub: WakeSubscription | None) -> None:
    if pubsub is not None:
        pubsub.close()


# The leader forgets known queues nobody uses any more.
#
# Every queue a worker consumes (its heartbeat) or a dispatch uses is known, with the time
# it was last seen (`keys.queues_seen_key`): the dashboard, the metrics and the leader's
# promotions list them. A queue named by mistake (`runtasks -Q emials`) would stay listed
# for ever; so the leader, every `CHECK_EVERY_MS`, forgets each queue not seen for
# `QUEUE_FORGET_AFTER` seconds (a setting, a day by default; 0: never) whose streams and
# delayed sets (every shard's) hold nothing. A queue that tasks or settings declare is
# listed all the same: it is never only in Redis.


CHECK_EVERY_MS = 10 * 60 * 1000


def forget_after_ms() -> int:
    """How long a queue may go unseen before it is forgotten (`QUEUE_FORGET_AFTER`), in
    ms; 0: never."""
    return round(get_settings().QUEUE_FORGET_AFTER * 1000)


def forget_idle_queues(store: ScheduleStore, now_ms: int,
                       forget_after: int | None = None) -> list[str]:
    """Forget the known queues not seen since `now_ms - forget_after` (ms; None: the
    setting's) that hold no message; returns their names. A queue seen again meanwhile
    is kept (the script compares its score). With 0 nothing is forgotten."""
    window = forget_after_ms() if forget_after is None else forget_after
    if window <= 0:
        return []
    cutoff = now_ms - window
    forgotten = []
    for name, seen_ms in sorted(store.queue_sightings().items()):
        if seen_ms >= cutoff or store.holds_messages(sharding.shards(name)):
            continue
        if store.forget_queue(name, cutoff):
            forgotten.append(name)
    if forgotten:
        logger.info("forgot the queues %s: not seen for %.0f h, and empty",
                    ", ".join(forgotten), window / 3_600_000)
    return forgotten
