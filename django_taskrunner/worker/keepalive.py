"""Heartbeats: while a worker holds messages, keep them reserved for it.

A message un-acked for longer than its reservation timeout may be reclaimed by another
worker; the heartbeat resets the idle time of every message the worker holds, running
or fetched and waiting in its buffer (XCLAIM ... JUSTID by its own consumer, through
`store/lua/hold.lua`, which never steals a message another worker has reclaimed), all
queues in one pipelined round trip (`Broker.hold_and_sync`), `BEATS_PER_TIMEOUT` times
per shortest timeout.

Each attempt's "running" record is written by this thread `START_LINGER_S` (2 ms) after
the attempt starts, not with the next beat: the attempt's thread only hands it over (a
list append; it wakes this thread only when its next wake-up is planned later than
needed), and this thread writes those that have run that long and still run, in one
round trip. A task that ended by then needs none (its outcome's record says all), and
a look that finds only such tasks makes the next come later: twice the time after it,
up to `START_LOOK_MAX_S` (20 ms); one that writes a start brings back the 2 ms. So a
worker draining short tasks writes no start at all and wakes this thread at most 50
times a second, not once or twice per batch of starts (each wake-up of a thread costs
its CPU far more than the Python it runs), while among them a long task's start write
lands up to 22 ms after its start.

The beat's round trip carries the rest of the task records of the running attempts:
"running" for one whose start write failed, the progress each gave since the last beat,
the read of their cancel flags, and the read of the cancelled sets of the streams whose
fetched messages wait in the buffer (so a message cancelled after its fetch is skipped
when it comes out of the buffer, even when no fetch follows). So while a task runs, the
worker beats at least every `CANCEL_CHECK_S`, and a `cancel(id)` reaches `ctx.cancelled`
within a second; an idle worker beats no more often than before.

The shortest timeout is the smallest of RESERVATION_TIMEOUT, the per-task timeouts of
the tasks registered for the worker's queues (what a buffered message may have), and
the timeouts of the running attempts; an attempt that starts with a shorter one than the
current wait was planned for wakes the thread at once. A 10-minute task with a 2-second
timeout is therefore never reclaimed while its worker lives and is not stalled; if the
worker dies, the heartbeats stop with it.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import defaultdict
from collections.abc import Callable

from django_taskrunner.core import clock
from django_taskrunner.store.errors import stalls_writes
from django_taskrunner.store.streams import Broker
from django_taskrunner.worker.outage import RedisStatus
from django_taskrunner.worker.running import Attempt, RunningSet
from django_taskrunner.worker.steps import progress_write, started_write

logger = logging.getLogger(__name__)

BEATS_PER_TIMEOUT = 4
MIN_INTERVAL = 0.05
MAX_INTERVAL = 10.0
# Longest time between beats while some attempt runs: how soon it sees a cancel.
CANCEL_CHECK_S = 0.5
# How long an attempt runs before its "running" write is due (one that ended by then
# needs none), and how often at most this thread looks for such writes.
START_LINGER_S = 0.002
# Looks that find only ended tasks come less and less often, down to this.
START_LOOK_MAX_S = 0.020


def heartbeat_interval(reservation_timeout: float) -> float:
    """Seconds between heartbeats: well under the timeout, never busy, never rare."""
    return min(MAX_INTERVAL, max(MIN_INTERVAL, reservation_timeout / BEATS_PER_TIMEOUT))


@functools.lru_cache(maxsize=64)
def beat_within(reservation_timeout: float) -> float:
    """Seconds after its start by which a running attempt needs a beat: its interval,
    and `CANCEL_CHECK_S` for its cancel flag (cached: asked at every start, of the few
    timeouts a worker's tasks have)."""
    return min(heartbeat_interval(reservation_timeout), CANCEL_CHECK_S)


class Heartbeat(threading.Thread):
    """Beats for every message the worker holds, every `heartbeat_interval` of the shortest
    timeout any of them may have.

    `held()` lists the (queue, stream id) of every message fetched and not finished,
    running or still waiting in the buffer; without it, only running attempts are held.
    A buffered message's own timeout is unknown until it is decoded, so `floor` (the
    shortest timeout a message of the worker's queues may have) counts for it. An attempt
    that starts with a shorter timeout than the one the wait was planned for wakes the
    thread, which then beats within that attempt's own interval.
    """

    def __init__(
        self, broker: Broker, consumer: str, running: RunningSet, reservation_timeout: float,
        status: RedisStatus, *, held: Callable[[], list[tuple[str, str]]] | None = None,
        floor: float | None = None, cancelled: dict[str, set[str]] | None = None,
    ) -> None:
        super().__init__(name="taskrunner-heartbeat", daemon=True)
        self.broker = broker
        self.consumer = consumer
        self.running = running
        self.reservation_timeout = reservation_timeout
        self.floor = reservation_timeout if floor is None else min(floor, reservation_timeout)
        self.status = status
        self.held = held
        # The executor's cancelled ids per shard, which each beat refreshes for the
        # shards holding buffered messages (None: not kept).
        self.cancelled = cancelled
        self._lock = threading.RLock()  # per task: `with self._lock` skips Condition's Python
        self._cond = threading.Condition(self._lock)
        self._stopping = False
        self._planned_interval = heartbeat_interval(self.floor)
        self._last_beat = clock.monotonic()
        self._lost: set[tuple[str, str]] = set()
        self._starts: list[Attempt] = []  # started, their "running" not written yet
        self._starts_since = 0.0  # when the first of them started
        self._starts_checked = -START_LOOK_MAX_S  # write_starts' last look (monotonic)
        self._look_every = START_LINGER_S  # the least time from that look to the next
        # When the thread's current wait ends (monotonic): a start that needs it sooner
        # wakes it; one it will see in time by then does not.
        self._wake_at = 0.0
        running.on_start(self._attempt_started)

    def run(self) -> None:
        while self._wait_for_next_beat():
            self.write_starts()
            if self._last_beat + self._planned_interval <= clock.monotonic():
                self._last_beat = clock.monotonic()
                self.beat()

    def _wait_for_next_beat(self) -> bool:
        """Sleep until one interval after the last beat (shortened by any attempt that
        starts meanwhile), or until the next look for due start writes: `START_LINGER_S`
        after the first start not written yet, and no sooner than `_look_every` after
        the last look; False once stopping."""
        with self._lock:
            while not self._stopping:
                self._planned_interval = interval = self.interval()
                now = clock.monotonic()
                wake_at = self._last_beat + interval
                if self._starts:
                    wake_at = min(wake_at, max(self._starts_since + START_LINGER_S,
                                               self._starts_checked + self._look_every))
                if wake_at <= now:
                    self._wake_at = now  # busy: a start meanwhile is seen without a wake-up
                    return True
                self._wake_at = wake_at
                self._cond.wait(wake_at - now)
            return False

    def _attempt_started(self, attempt: Attempt) -> None:
        """Hand the attempt's "running" write to this thread, and wake it only if its
        wait ends later than the attempt needs it: its start write `START_LINGER_S` after
        the start, its beats (sooner for a short timeout) and, while it runs, a look at
        its cancel flag every `CANCEL_CHECK_S` (called on the starting thread for every
        attempt: one uncontended lock; while tasks keep starting, no wake-up at all)."""
        started = attempt.started
        need = started + beat_within(attempt.reservation_timeout)
        with self._lock:
            if attempt.record_ttl > 0:
                if not self._starts:
                    self._starts_since = started
                self._starts.append(attempt)
                need = min(need, max(started + START_LINGER_S,
                                     self._starts_checked + self._look_every))
            if need < self._wake_at:
                self._wake_at = need  # it plans again at once: no second wake-up meanwhile
                self._cond.notify()

    def write_starts(self) -> None:
        """Write "running" for the attempts handed over that have run `START_LINGER_S`
        and still run, one round trip (the younger ones wait for their turn); never
        raises (a failed write is the next beat's to do)."""
        now = clock.monotonic()
        until = now - START_LINGER_S  # started by then: due now
        with self._lock:
            self._starts_checked = now
            if not self._starts or self._starts_since > until:
                return
            started = [attempt for attempt in self._starts if attempt.started <= until]
            self._starts = [attempt for attempt in self._starts if attempt.started > until]
            self._starts_since = min((attempt.started for attempt in self._starts),
                                     default=0.0)
        attempts = [attempt for attempt in started
                    if not attempt.start_recorded and self.running.holds(attempt)]
        with self._lock:  # all ended: short tasks, which need no look soon
            self._look_every = (START_LINGER_S if attempts
                                else min(2 * self._look_every, START_LOOK_MAX_S))
        if not attempts:
            return
        try:
            self.broker.records.write([started_write(attempt, self.consumer)
                                       for attempt in attempts])
        except Exception as exc:
            if stalls_writes(exc):  # unreachable, or refusing writes (OOM, READONLY...)
                self.status.failed(exc, "writing the records of started tasks")
                return
            logger.exception("could not write the records of %d started tasks; the next "
                             "heartbeat writes them", len(attempts))
            return
        self.status.succeeded()
        for attempt in attempts:
            attempt.start_recorded = True

    def shortest_timeout(self) -> float:
        """The shortest reservation timeout of what the worker holds now, or may soon."""
        timeouts = [attempt.reservation_timeout for attempt in self.running.snapshot()]
        return min([self.floor, *timeouts])

    def interval(self) -> float:
        """Seconds to the next beat: `CANCEL_CHECK_S` at most while a task runs."""
        interval = heartbeat_interval(self.shortest_timeout())
        return min(interval, CANCEL_CHECK_S) if self.running.snapshot() else interval

    def _held_by_queue(self) -> tuple[dict[str, list[str]], set[tuple[str, str]]]:
        """Stream ids to beat per queue, and the (queue, id) of the running ones."""
        running = {(attempt.shard, attempt.stream_id) for attempt in self.running.snapshot()}
        held = self._held_now() | running
        by_queue: dict[str, list[str]] = defaultdict(list)
        for queue, stream_id in held:
            if stream_id:
                by_queue[queue].append(stream_id)
        return by_queue, running

    def _held_now(self) -> set[tuple[str, str]]:
        return set(self.held()) if self.held is not None else set()

    def _buffered(self, running: set[tuple[str, str]]) -> set[tuple[str, str]]:
        """(queue, stream id) of the messages fetched and not started yet."""
        return self._held_now() - running

    def beat(self) -> None:
        """One pipelined heartbeat for every held message; never raises."""
        by_queue, running = self._held_by_queue()
        if not by_queue:
            return
        attempts = [attempt for attempt in self.running.snapshot() if attempt.record_ttl > 0]
        writes = [write for attempt in attempts
                  if (write := progress_write(attempt) if attempt.start_recorded
                      else started_write(attempt, self.consumer)) is not None]
        watched = [attempt.message.id for attempt in attempts]
        renewals = [slot for attempt in self.running.snapshot() for slot in attempt.slots]
        # Shards with fetched messages not started yet: their cancelled sets are read too,
        # so a message cancelled after its fetch is skipped even when no fetch follows.
        buffered = [] if self.cancelled is None else sorted(
            {queue for queue, _stream_id in self._buffered(running)})
        try:
            lost_by_queue, cancelled, cancelled_sets = self.broker.hold_and_sync(
                self.consumer, by_queue, writes, watched, renewals=renewals, buffered=buffered)
        except Exception as exc:
            if stalls_writes(exc):  # unreachable, or refusing writes (OOM, READONLY...)
                self.status.failed(exc, "sending heartbeats")
                return
            logger.exception("heartbeat failed; trying again in %.1fs", self.interval())
            return
        self.status.succeeded()
        self._learn(attempts, cancelled, cancelled_sets)
        self._lost &= running
        self._report(lost_by_queue, running)

    def _learn(self, attempts: list[Attempt], cancelled: set[str],
               cancelled_sets: dict[str, set[str]]) -> None:
        """What a beat read: the buffered shards' cancelled sets, and the running attempts
        now recorded as started or cancelled by a client."""
        if self.cancelled is not None:
            for shard, members in cancelled_sets.items():
                # A union: a fetch that read the set meanwhile may know newer members.
                self.cancelled[shard] = self.cancelled.get(shard, set()) | members
        for attempt in attempts:
            attempt.start_recorded = True
            if attempt.message.id in cancelled and not attempt.cancel_requested:
                logger.info("task=%s id=%s was cancelled; ctx.cancelled is now True",
                            attempt.task.name, attempt.message.id)
                attempt.cancelled_by_request()

    def _report(self, lost_by_queue: dict[str, list[str]],
                running: set[tuple[str, str]]) -> None:
        """Warn of the running messages another worker reclaimed during the beat."""
        # Running still, after the round trip: one that ended meanwhile was acked by
        # this worker (not lost to another), so only these are reported.
        still = {(attempt.shard, attempt.stream_id) for attempt in self.running.snapshot()}
        for queue, lost_ids in lost_by_queue.items():
            for stream_id in lost_ids:
                if (queue, stream_id) in running and (queue, stream_id) in still:
                    self._report_lost(queue, stream_id)
                else:  # still in the buffer: the worker checks it before it runs
                    logger.debug("buffered message %s of queue %s was reclaimed by another "
                                 "worker", stream_id, queue)

    def _report_lost(self, queue: str, stream_id: str) -> None:
        """Warn once per running message that another worker took it over."""
        if (queue, stream_id) in self._lost:
            return
        self._lost.add((queue, stream_id))
        logger.warning("message %s of queue %s is running here but another worker reclaimed "
                       "it (this worker was stalled past the reservation timeout?); it may "
                       "run twice", stream_id, queue)

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            self._cond.notify()
        if self.is_alive():
            self.join()
