"""Reclaim: a message whose worker died is run by another one: after
`RESERVATION_TIMEOUT` (the reclaimer, here), or at once when the worker's end is known
(the hand-back, below).

A worker holds a message from its delivery until its ack; while the task runs, the
heartbeat keeps the message's idle time near zero. A message idle for longer than its
reservation timeout therefore belongs to a worker that died (or stalled), and any live
worker takes it over (XCLAIM) into its own bounded buffer. Each queue's fetcher makes a
reclaim pass, when one is due, before reading new messages: a busy worker gives its
free room to the messages of dead workers first, so they do not wait for the queue to
drain.

Per-task timeouts: a message carries its task's `reservation_timeout` (wire field
`rt`), else the worker's RESERVATION_TIMEOUT applies. The reclaimer lists entries idle
for the shortest timeout it knows of (XPENDING ... IDLE), reads their bodies, and claims
each only once idle for its own timeout; XCLAIM's min-idle check makes that atomic, so
an entry its holder refreshed meanwhile is skipped. (XAUTOCLAIM takes one min-idle for
all entries and raises the delivery counter; neither fits.)

Delivery counter: a claim keeps it (RETRYCOUNT), and a worker raises it when it starts
a reclaimed message (`store/lua/hold.lua`). So it counts runs that may have started:
messages that only sat in a dead worker's buffer are not charged for its death.

After a Redis outage, reclaiming waits one reservation timeout: heartbeats stopped
during the outage, so every held message looks idle until its worker beats again.

The reclaimer also removes consumers that are long idle and hold nothing
(DEAD_CONSUMER_TIMEOUT); at start-up, each fetcher takes back at once what its own
consumer name held before a restart.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from django_taskrunner.conf import get_settings
from django_taskrunner.core import clock, sharding
from django_taskrunner.core import unique as locks
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.core.records import entry_record
from django_taskrunner.core.registry import registry
from django_taskrunner.core.task import Task
from django_taskrunner.exceptions import InvalidTaskPayload, WorkerLost
from django_taskrunner.stats import recorder as stats_writes
from django_taskrunner.store import keys
from django_taskrunner.store.errors import REDIS_DOWN, REDIS_ERROR
from django_taskrunner.store.streams import Broker, Claim, Entry, Pending, Requeue
from django_taskrunner.worker.executor import Executor
from django_taskrunner.worker.fetcher import Delivery
from django_taskrunner.worker.outage import RedisStatus
from django_taskrunner.worker.running import Attempt
from django_taskrunner.worker.steps import Run, count_run, put_back, retry_delay

logger = logging.getLogger(__name__)

CHECKS_PER_TIMEOUT = 10
MIN_INTERVAL = 0.1
MAX_INTERVAL = 30.0


class Buffer(Protocol):
    """What the reclaimer needs of the worker's buffer: a way in, and what it holds."""

    def accept(self, queue: str, entries: list[Entry], runs: dict[str, int] | None = None
               ) -> None: ...

    def holds(self, queue: str, stream_id: str) -> bool: ...


def shortest_timeout(queue: str, default: float) -> float:
    """The smallest reservation timeout a message of `queue` (or of its shard) may have,
    as far as we know."""
    queue = keys.queue_of(queue)
    default_queue = get_settings().DEFAULT_QUEUE
    timeouts = [default]
    for task in registry:
        if (task.options.queue or default_queue) == queue and task.options.reservation_timeout:
            timeouts.append(task.options.reservation_timeout)
    return min(timeouts)


def dead_consumer_timeout(configured: float | None, reservation_timeout: float) -> float:
    """DEAD_CONSUMER_TIMEOUT, or by default the larger of an hour and ten timeouts."""
    if configured is not None:
        return configured
    return max(3600.0, 10 * reservation_timeout)


def reclaim_interval(shortest: float) -> float:
    """Seconds between two reclaim passes: a small fraction of the shortest timeout."""
    return min(MAX_INTERVAL, max(MIN_INTERVAL, shortest / CHECKS_PER_TIMEOUT))


def timeout_ms(body: bytes, default_ms: int) -> int:
    """The reservation timeout of one message body; never raises.

    An entry that is not a usable message gets the default: once reclaimed, the
    executor records it as failed and acks it. No body can stop a reclaim pass.
    """
    try:
        own = TaskMessage.from_json(body).reservation_timeout_ms
    except InvalidTaskPayload:
        return default_ms
    except Exception:  # from_json raises only InvalidTaskPayload: a bug, but not fatal here
        logger.exception("could not read the reservation timeout of a pending message")
        return default_ms
    return default_ms if own is None else own


class Reclaimer:
    """Takes over idle messages of dead workers and removes dead consumers.

    Each queue's fetcher calls `reclaim_due()` before it reads new messages, so the
    worker's free room goes to messages of dead workers first.
    """

    def __init__(
        self, broker: Broker, consumer: str, queues: Sequence[str], buffer: Buffer, *,
        reservation_timeout: float, dead_consumer_timeout: float, status: RedisStatus,
        cancelled: dict[str, set[str]] | None = None,
    ) -> None:
        self.broker, self.consumer, self.buffer = broker, consumer, buffer
        # The executor's cancelled ids per stream: read again after a claim, so a message
        # cancelled while its dead worker held it is skipped, not run.
        self.cancelled = cancelled
        self.default_ms = int(reservation_timeout * 1000)
        self.floor_ms = {q: int(shortest_timeout(q, reservation_timeout) * 1000) for q in queues}
        self.interval = reclaim_interval(min(self.floor_ms.values(), default=0) / 1000)
        self.dead_consumer_ms = int(dead_consumer_timeout * 1000)
        self.sweep_interval = min(300.0, max(1.0, dead_consumer_timeout / 10))
        self.status = status
        self._cursor = dict.fromkeys(queues, "-")
        self._own_cursor = dict.fromkeys(queues, "-")
        now = clock.monotonic()
        self._next_pass = dict.fromkeys(queues, now + self.interval)
        self._next_sweep = dict.fromkeys(queues, now + self.sweep_interval)

    def add_stream(self, stream: str, shard: str) -> None:
        """Reclaim from `stream` too (a priority level of `shard`), on the shard's timings."""
        if stream in self.floor_ms:
            return
        self.floor_ms[stream] = self.floor_ms.get(shard, self.default_ms)
        self._cursor[stream] = self._own_cursor[stream] = "-"
        now = clock.monotonic()
        self._next_pass[stream] = now + self.interval
        self._next_sweep[stream] = now + self.sweep_interval

    def reclaim_due(self, queue: str, room: int) -> int:
        """Reclaim into `room` if a pass over `queue` is due; returns how many were taken.

        A pass that fills the room leaves the next one due at once: more may be waiting.
        Never raises; a failure is logged (a Redis outage through the shared status).
        """
        now = clock.monotonic()
        if now >= self._next_sweep[queue]:
            self._next_sweep[queue] = now + self.sweep_interval
            self._guard(lambda: self.sweep(queue), "removing dead consumers")
        if now < self._next_pass[queue]:
            return 0
        claimed = self._guard(lambda: self.reclaim(queue, room), f"reclaiming queue {queue}")
        self._next_pass[queue] = now if claimed and claimed >= room else now + self.interval
        return claimed or 0

    def _guard(self, call: Callable[[], Any], doing: str) -> Any:
        try:
            result = call()
        except REDIS_DOWN as exc:
            self.status.failed(exc, doing)
        except Exception:
            logger.exception("error while %s", doing)
        else:
            self.status.succeeded()
            return result
        return None

    def take_back_own(self, queue: str, room: int) -> int:
        """Claim at once what this consumer name held when its process last stopped.

        The queue's fetcher calls this before its first read, so every entry pending
        for this consumer then is a leftover of an earlier process.
        """
        if room <= 0:
            return 0
        rows = self.broker.pending_idle(queue, 0, self._own_cursor[queue], room, self.consumer)
        if not rows:
            return 0
        # Page forward: an entry taken back may run and leave the buffer before its ack is
        # sent, and must not look like a leftover on the next call.
        self._own_cursor[queue] = f"({rows[-1].stream_id}"
        rows = [row for row in rows if not self.buffer.holds(queue, row.stream_id)]
        claims = [Claim(row.stream_id, 0, row.deliveries) for row in rows]
        return self._claim(queue, claims, "held by this consumer before a restart")

    def reclaim(self, queue: str, room: int) -> int:
        """One pass over `queue`; returns how many messages were claimed (at most `room`).

        Right after an outage every message looks idle, live workers' too: reclaiming
        waits one reservation timeout, so they can send heartbeats and acks first.
        """
        if room <= 0 or self.status.up_for() * 1000 < self.floor_ms[queue]:
            return 0
        rows = self.broker.pending_idle(queue, self.floor_ms[queue], self._cursor[queue], room)
        self._cursor[queue] = "-" if len(rows) < room else f"({rows[-1].stream_id}"
        rows = [row for row in rows if not (row.consumer == self.consumer
                                            and self.buffer.holds(queue, row.stream_id))]
        if not rows:
            return 0
        return self._claim(queue, self._due(queue, rows)[:room],
                           "un-acked past their reservation timeout: their worker died or stalled")

    def _due(self, queue: str, rows: list[Pending]) -> list[Claim]:
        """The rows idle for their own timeout; entries deleted from the stream are acked."""
        bodies = self.broker.bodies(queue, [row.stream_id for row in rows])
        self.broker.forget(queue, [sid for sid, body in bodies.items() if body is None])
        claims = []
        for row in rows:
            body = bodies[row.stream_id]
            if body is None:
                continue
            own_ms = timeout_ms(body, self.default_ms)
            if row.idle_ms >= own_ms:
                claims.append(Claim(row.stream_id, own_ms, row.deliveries))
        return claims

    def _claim(self, queue: str, claims: list[Claim], why: str) -> int:
        entries = self.broker.claim(queue, self.consumer, claims) if claims else []
        if entries:
            logger.warning("queue %s: took over %d message(s) %s", queue, len(entries), why)
            if self.cancelled is not None:  # after the claim: a later cancel notifies us
                self.cancelled[queue] = self.broker.records.cancelled_members(queue)
            self.buffer.accept(queue, entries, {c.stream_id: c.deliveries for c in claims})
        return len(entries)

    def sweep(self, queue: str) -> None:
        removed = self.broker.delete_idle_consumers(queue, self.dead_consumer_ms, self.consumer)
        if removed:
            logger.info("queue %s: removed %d dead consumer(s) from the group: %s", queue,
                        len(removed), ", ".join(removed))


# Hand back the messages of a worker process that ended: at once, not after
# `RESERVATION_TIMEOUT`.
#
# Whoever knows a consumer is gone (the supervisor of `runtasks --processes`, which saw its
# child end) calls `hand_back()` with what it knows of the attempts the consumer had
# *started*. Every entry still pending for that consumer is then settled:
#
# - one it had not started (buffered, or finished with its ack not sent yet) counts no
#   attempt. Given live `adopters` (its sibling processes), it moves to one of them,
#   keeping its place and delivery counter (`adopt.lua`): the caller tells that sibling,
#   which runs it next, instead of after everything queued behind it. Otherwise it goes
#   back to the end of its stream (`requeue.lua`, which acks the old entry in the same
#   script), for any worker to read: unchanged, but for the runs that died that its
#   delivery counter says (it was given to a sibling that died too), which go into its
#   attempt (`check_reclaimed` in `worker/steps.py`);
# - one it was running counts as a run that died (a failed attempt), whose error says how
#   the process ended. With retries left, a `retry_backoff` of 0 and a sibling to take it,
#   it moves to the sibling with its delivery counter raised, so that the sibling's
#   reclaimed-run check (`worker/steps.py`) counts the death and runs it next;
#   past its retries it is recorded as failed (`WorkerLost`, naming the signal or exit
#   code) and acked, so a task that kills its process stops after `max_retry + 1` runs,
#   never in a crash loop.
#   Without a sibling, with a backoff to wait, or for the attempt a child was ended for
#   (stuck past its time limit: `TimeLimitExceeded`), the executor's own outcome steps
#   settle it: a retry after its `retry_backoff`, or a failed row.
#
# Every running attempt settled here counts in the queue's figures (`get_stats`, the
# `taskrunner_stats` command) as a failed run, retried or failed for good, as the dead
# process would have counted it.
#
# Each requeue checks, atomically, that the entry is still the dead consumer's: an entry
# another worker reclaimed meanwhile is left to that worker. Safe to call twice. The dead
# consumer, once it holds nothing, is removed from the group (and so from the dashboard's
# consumer lists).


PAGE = 500  # pending entries read per round trip


@dataclass(frozen=True)
class Started:
    """An attempt a worker process said it started: the stream it read it from, and when
    (the system's monotonic clock, shared by the processes of one host)."""

    shard: str
    stream_id: str
    at: float


@dataclass
class HandBack:
    """What one `hand_back()` did: counts for the log, and what each adopter was given
    (`{consumer: {stream: [(stream id, delivery counter), ...]}}`) to tell it."""

    requeued: int = 0
    failed_attempts: int = 0
    adopted: dict[str, dict[str, list[tuple[str, int]]]] = field(default_factory=dict)

    def describe(self) -> str:
        given = sum(len(ids) for streams in self.adopted.values() for ids in streams.values())
        return (f"{given} message(s) given to sibling processes, {self.requeued} back on their "
                f"queue unchanged, {self.failed_attempts} running attempt(s) counted as failed")


def all_streams(broker: Broker, queues: Sequence[str]) -> list[str]:
    """Every stream a worker of `queues` may read: each shard and each priority level in use."""
    levels = broker.levels_in_use(sharding.all_shards(queues))
    return [stream for streams in levels.values() for stream in streams]


def hand_back(
    broker: Broker, consumer: str, queues: Sequence[str],
    started: Mapping[tuple[str, str], Started], cause: str, adopters: Sequence[str] = (), *,
    rerun_started: bool = True, cancelled: bool = False,
) -> HandBack:
    """Settle every entry pending for `consumer` on the streams of `queues` (see above).

    `started`: the attempts it was running, by (stream, stream id); `cause`: how the
    process ended ("killed by signal 9 (SIGKILL)"), for the failed attempts' error;
    `adopters`: live consumers that may take the rest, least busy first;
    `rerun_started`: False to settle the running ones through the executor even with
    adopters (a task ended for its time limit); `cancelled`: the running ones were
    cancelled with `terminate=True` (settled as cancelled). Redis errors pass through:
    the caller tries again later (nothing is lost: what was not settled is still
    `consumer`'s).
    """
    settler = Settler(broker, consumer, started, cause, adopters, rerun_started)
    settler.cancelled = cancelled
    for stream in all_streams(broker, queues):
        settler.settle_stream(stream)
        broker.drop_consumer(stream, consumer)  # gone from the consumer lists, if empty
    settler.count()
    return settler.done


class Settler:
    """One hand-back: the entries of each stream, a page at a time."""

    def __init__(self, broker: Broker, consumer: str,
                 started: Mapping[tuple[str, str], Started], cause: str,
                 adopters: Sequence[str], rerun_started: bool) -> None:
        self.broker, self.consumer, self.started, self.cause = broker, consumer, started, cause
        self.adopters, self.rerun_started = list(adopters), rerun_started
        self.done = HandBack()
        self.executor = Executor(broker, consumer,
                                 lambda shard, stream_id: broker.ack(shard, [stream_id]))
        self._turn = 0  # the adopters take turns, one entry each
        self.cancelled = False  # the started attempts were cancelled (terminate=True)

    def count(self) -> None:
        """Add the attempts settled here to the queues' figures (`get_stats`): the dead
        process never flushed them. Lost if Redis fails now: figures, not tasks."""
        batch = self.executor.stats.drain()
        if not batch:
            return
        try:
            stats_writes.add_figures(self.broker.store.stats, batch,
                                     now_ms=clock.now_ms(), window=get_settings().STATS_WINDOW)
        except REDIS_ERROR as exc:
            logger.warning("could not count %d settled attempt(s) in the figures (%s)",
                           self.done.failed_attempts, exc)

    def settle_stream(self, stream: str) -> None:
        cursor = "-"
        while True:
            rows = self.broker.pending_idle(stream, 0, cursor, PAGE, self.consumer)
            if rows:
                cursor = f"({rows[-1].stream_id}"
                self._settle_page(stream, {row.stream_id: row.deliveries for row in rows})
            if len(rows) < PAGE:
                return

    def _settle_page(self, stream: str, counters: dict[str, int]) -> None:
        bodies = self.broker.bodies(stream, list(counters))
        self.broker.forget(stream, [sid for sid, body in bodies.items() if body is None])
        requeues: list[Requeue] = []
        given: dict[str, dict[str, int | None]] = {}
        for stream_id, body in bodies.items():
            if body is None:
                continue
            decided = self._running(stream, stream_id, body, counters[stream_id])
            if decided is False:  # settled here: retried, or failed for good
                continue
            if self.adopters:  # None: keep the counter; a number: a run that died
                adopter = self.adopters[self._turn % len(self.adopters)]
                self._turn += 1
                given.setdefault(adopter, {})[stream_id] = decided
            else:
                # a new entry, delivered once: the runs its counter says died go into
                # its attempt, else a task that kills its process would run once more
                moved = put_back(body, counters[stream_id])
                requeues.append(Requeue(stream, stream_id, moved,
                                        record=entry_record(moved, stream)))
        self._adopt(stream, given, counters)
        if requeues:
            self.broker.settle(self.consumer, {}, requeues)
            self.done.requeued += len(requeues)

    def _running(self, stream: str, stream_id: str, body: bytes, counter: int
                 ) -> int | None | bool:
        """For an entry it was running: False once settled here, or the delivery counter
        a sibling gets it with. None for one it had not started (or that cannot be read
        here: a worker records it as it would any bad message)."""
        started = self.started.get((stream, stream_id))
        if started is None:
            return None
        try:
            message = TaskMessage.from_json(body, stream_id=stream_id)
        except InvalidTaskPayload:
            return None
        task = registry.find(message.task_name)
        if task is None:
            return None
        self.done.failed_attempts += 1
        # A first delivery's counter was not raised when it started; a reclaimed run's was.
        raised = 2 if counter <= 1 else counter
        died = (message.attempt - 1) + (raised - 1)
        logger.warning("task=%s id=%s queue=%s attempt=%d was running when its worker process "
                       "ended (%s)", task.name, message.id, message.queue, died, self.cause)
        run = self._run(stream, stream_id, body, message, task, started, died)
        # A run that died is a failed attempt: its re-run waits its retry_backoff as any
        # retry does (through the executor's steps below), unless that backoff is 0.
        waits = died < task.options.max_retry + 1 and retry_delay(task, died) > 0
        if self.adopters and self.rerun_started and not waits:
            count_run(self.executor, run)  # the executor's steps count it on the other path
            if died < task.options.max_retry + 1:
                self.executor.stats.retried(message.queue, run.shown_name)
                return raised
            assert run.error is not None
            self.executor.record_and_ack(run, run.error, attempts=died, event=locks.FAILED)
            return False
        # The outcome steps count attempts by the message's `attempt`: make it the runs
        # that died so far, reclaimed ones included, so a retry starts from there.
        assert run.message is not None
        run.message = replace(run.message, attempt=died)
        self.executor.settle(run)
        return False

    def _run(self, stream: str, stream_id: str, body: bytes, message: TaskMessage,
             task: Task, started: Started, died: int) -> Run:
        """The run that died, as the executor's outcome steps take it."""
        started_ms = clock.now_ms() - int((clock.monotonic() - started.at) * 1000)
        attempt = Attempt(task, message, threading.current_thread(),
                          self.executor.reservation_timeout, stream, started=started.at,
                          started_ms=started_ms, cancel_requested=self.cancelled)
        return Run(Delivery(stream, stream_id, body), message, task, attempt,
                   WorkerLost(task.name, died, self.cause))

    def _adopt(self, stream: str, given: dict[str, dict[str, int | None]],
               counters: dict[str, int]) -> None:
        for adopter, ids in given.items():
            moved = self.broker.adopt(stream, self.consumer, adopter, ids)
            if moved:
                self.done.adopted.setdefault(adopter, {}).setdefault(stream, []).extend(
                    (sid, counters[sid] if ids[sid] is None else ids[sid]) for sid in moved)


class Adopter(Protocol):
    """A live worker that takes a dead one's messages into its buffer (`Worker`)."""

    consumer: str

    def accept(self, queue: str, entries: list[Entry], runs: dict[str, int] | None = None
               ) -> None: ...


def take_adopted(broker: Broker, adopter: Adopter, stream: str,
                 counters: Mapping[str, int]) -> int:
    """Hand the entries moved to `adopter` (`{stream id: delivery counter}`) to its buffer,
    as reclaimed ones: they run next, their counter checked (`check_reclaimed`, worker/steps.py)."""
    bodies = broker.bodies(stream, list(counters))
    broker.forget(stream, [sid for sid, body in bodies.items() if body is None])
    entries = [(sid, body) for sid, body in bodies.items() if body is not None]
    if entries:
        adopter.accept(stream, entries, dict(counters))
    return len(entries)
