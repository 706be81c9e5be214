"""Reclaim: a message whose worker died is run by another one.

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
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from django_taskrunner.conf import get_settings
from django_taskrunner.core import clock
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.core.registry import registry
from django_taskrunner.exceptions import InvalidTaskPayload
from django_taskrunner.store import keys
from django_taskrunner.store.errors import REDIS_DOWN
from django_taskrunner.store.streams import Broker, Claim, Entry, Pending
from django_taskrunner.worker.outage import RedisStatus

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
