"""Hand back the messages of a worker process that ended: at once, not after
`RESERVATION_TIMEOUT`.

Whoever knows a consumer is gone (the supervisor of `runtasks --processes`, which saw its
child end) calls `hand_back()` with what it knows of the attempts the consumer had
*started*. Every entry still pending for that consumer is then settled:

- one it had not started (buffered, or finished with its ack not sent yet) counts no
  attempt. Given live `adopters` (its sibling processes), it moves to one of them,
  keeping its place and delivery counter (`adopt.lua`): the caller tells that sibling,
  which runs it next, instead of after everything queued behind it. Otherwise it goes
  back to the end of its stream unchanged (`requeue.lua`, which acks the old entry in
  the same script), for any worker to read;
- one it was running counts as a failed attempt, whose error says how the process ended
  (`WorkerLost`, or `TimeLimitExceeded` for one that was ended because it ignored its time
  limit): the executor's own outcome steps then retry it (`max_retry`, `retry_backoff`) or
  record it as failed for good, so a task that kills its process stops after its retries.

Each requeue checks, atomically, that the entry is still the dead consumer's: an entry
another worker reclaimed meanwhile is left to that worker. Safe to call twice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from django_taskrunner.core import clock
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.core.registry import registry
from django_taskrunner.exceptions import InvalidTaskPayload, WorkerLost
from django_taskrunner.store import sharding
from django_taskrunner.store.broker import Broker, Requeue
from django_taskrunner.worker.delivery import Delivery
from django_taskrunner.worker.executor import Executor
from django_taskrunner.worker.running import Attempt
from django_taskrunner.worker.steps.run import Run

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


def streams_of(broker: Broker, queues: Sequence[str]) -> list[str]:
    """Every stream a worker of `queues` may read: each shard and each priority level in use."""
    levels = broker.levels_in_use(sharding.all_shards(queues))
    return [stream for streams in levels.values() for stream in streams]


def hand_back(
    broker: Broker, consumer: str, queues: Sequence[str],
    started: Mapping[tuple[str, str], Started], cause: str, adopters: Sequence[str] = (),
) -> HandBack:
    """Settle every entry pending for `consumer` on the streams of `queues` (see above).

    `started`: the attempts it was running, by (stream, stream id); `cause`: how the
    process ended ("killed by signal 9 (SIGKILL)"), for the failed attempts' error;
    `adopters`: live consumers that may take the rest, least busy first.
    Redis errors pass through: the caller tries again later (nothing was lost: what was
    not settled is still pending for `consumer`).
    """
    done = HandBack()
    turn = 0  # the adopters take turns, one entry each
    executor = Executor(broker, consumer, lambda shard, stream_id: broker.ack(shard, [stream_id]))
    for stream in streams_of(broker, queues):
        cursor = "-"
        while True:
            rows = broker.pending_idle(stream, 0, cursor, PAGE, consumer)
            if not rows:
                break
            cursor = f"({rows[-1].stream_id}"
            bodies = broker.bodies(stream, [row.stream_id for row in rows])
            broker.forget(stream, [sid for sid, body in bodies.items() if body is None])
            requeues, counters = [], {row.stream_id: row.deliveries for row in rows}
            given: dict[str, list[str]] = {}
            for stream_id, body in bodies.items():
                if body is None:
                    continue
                attempt = started.get((stream, stream_id))
                if attempt is not None and _fail_attempt(executor, stream, stream_id, body,
                                                          attempt, cause):
                    done.failed_attempts += 1
                elif adopters:
                    given.setdefault(adopters[turn % len(adopters)], []).append(stream_id)
                    turn += 1
                else:
                    requeues.append(Requeue(stream, stream_id, body))
            _adopt(broker, consumer, stream, given, counters, done)
            if requeues:
                broker.settle(consumer, {}, requeues)
                done.requeued += len(requeues)
            if len(rows) < PAGE:
                break
    return done


def _adopt(broker: Broker, consumer: str, stream: str, given: dict[str, list[str]],
           counters: dict[str, int], done: HandBack) -> None:
    for adopter, stream_ids in given.items():
        moved = broker.adopt(stream, consumer, adopter, stream_ids)
        if moved:
            done.adopted.setdefault(adopter, {}).setdefault(stream, []).extend(
                (stream_id, counters[stream_id]) for stream_id in moved)


def _fail_attempt(executor: Executor, stream: str, stream_id: str, body: bytes,
                  started: Started, cause: str) -> bool:
    """Settle a started entry as a failed attempt through the executor's outcome steps;
    False when it cannot be read here (it then goes back unchanged, for a worker to
    record as it would any bad message)."""
    try:
        message = TaskMessage.from_json(body, stream_id=stream_id)
    except InvalidTaskPayload:
        return False
    task = registry.find(message.task_name)
    if task is None:
        return False
    attempt = Attempt(task, message, threading.current_thread(),
                      executor.reservation_timeout, stream, started=started.at,
                      started_ms=clock.now_ms() - int((clock.monotonic() - started.at) * 1000))
    run = Run(Delivery(stream, stream_id, body), message, task, attempt,
              WorkerLost(task.name, message.attempt, cause))
    logger.warning("task=%s id=%s queue=%s attempt=%d was running when its worker process "
                   "ended (%s)", task.name, message.id, message.queue, message.attempt, cause)
    executor.settle(run)
    return True
