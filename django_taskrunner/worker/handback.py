"""Hand back the messages of a worker process that ended: at once, not after
`RESERVATION_TIMEOUT`.

Whoever knows a consumer is gone (the supervisor of `runtasks --processes`, which saw its
child end) calls `hand_back()` with what it knows of the attempts the consumer had
*started*. Every entry still pending for that consumer is then settled:

- one it had not started (buffered, or finished with its ack not sent yet) counts no
  attempt. Given live `adopters` (its sibling processes), it moves to one of them,
  keeping its place and delivery counter (`adopt.lua`): the caller tells that sibling,
  which runs it next, instead of after everything queued behind it. Otherwise it goes
  back to the end of its stream (`requeue.lua`, which acks the old entry in the same
  script), for any worker to read: unchanged, but for the runs that died that its
  delivery counter says (it was given to a sibling that died too), which go into its
  attempt (`steps/reclaimed.py`);
- one it was running counts as a run that died (a failed attempt), whose error says how
  the process ended. With retries left, a `retry_backoff` of 0 and a sibling to take it,
  it moves to the sibling with its delivery counter raised, so that the sibling's
  reclaimed-run check (`worker/steps.py`) counts the death and runs it next;
  past its retries it is recorded as failed (`WorkerLost`, naming the signal or exit
  code) and acked, so a task that kills its process stops after `max_retry + 1` runs,
  never in a crash loop.
  Without a sibling, with a backoff to wait, or for the attempt a child was ended for
  (stuck past its time limit: `TimeLimitExceeded`), the executor's own outcome steps
  settle it: a retry after its `retry_backoff`, or a failed row.

Every running attempt settled here counts in the queue's figures (`get_stats`, the
`taskrunner_stats` command) as a failed run, retried or failed for good, as the dead
process would have counted it.

Each requeue checks, atomically, that the entry is still the dead consumer's: an entry
another worker reclaimed meanwhile is left to that worker. Safe to call twice. The dead
consumer, once it holds nothing, is removed from the group (and so from the dashboard's
consumer lists).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from django_taskrunner.conf import get_settings
from django_taskrunner.core import clock, sharding
from django_taskrunner.core import unique as locks
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.core.registry import registry
from django_taskrunner.core.task import Task
from django_taskrunner.exceptions import InvalidTaskPayload, WorkerLost
from django_taskrunner.stats import writes as stats_writes
from django_taskrunner.store.errors import REDIS_ERROR
from django_taskrunner.store.streams import Broker, Entry, Requeue
from django_taskrunner.worker.executor import Executor
from django_taskrunner.worker.fetcher import Delivery
from django_taskrunner.worker.running import Attempt
from django_taskrunner.worker.steps import Run, count_run, put_back, retry_delay

logger = logging.getLogger(__name__)

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
                requeues.append(Requeue(stream, stream_id,
                                        put_back(body, counters[stream_id])))
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
    as reclaimed ones: they run next, their counter checked (`steps/reclaimed.py`)."""
    bodies = broker.bodies(stream, list(counters))
    broker.forget(stream, [sid for sid, body in bodies.items() if body is None])
    entries = [(sid, body) for sid, body in bodies.items() if body is not None]
    if entries:
        adopter.accept(stream, entries, dict(counters))
    return len(entries)
