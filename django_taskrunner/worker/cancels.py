"""Cancels heard at once: the book of what this worker must skip, and its listener.

`cancel(id)` PUBLISHes a notice on the prefix's cancels channel (`cancel_entry.lua`,
`keys.cancel_channel`) naming the consumer that fetched the message, if one did. Each
worker process runs one `CancelListener` thread on a pub/sub connection of its own
(reconnecting after a drop), which hands the notice to the executor's `CancelBook`:

- a message still in the buffer is marked, so the skip step acks it without running it;
- an attempt running it sees `ctx.cancelled` at once.

The worker then answers the waiting `cancel()` call ("skip" or "running"), so once
`cancel()` returns, a message this worker had not started never starts. The skip
decision and the notice take the book's lock, so they cannot cross. The heartbeat's
read of the cancel flags and cancelled sets stays the fallback when a notice is lost
(a dropped connection): the task then sees `ctx.cancelled` within a second.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

from django_taskrunner.core import clock
from django_taskrunner.core.records import TERMINATE_NOTICE
from django_taskrunner.core.unique import holder_value
from django_taskrunner.store import keys
from django_taskrunner.store.errors import REDIS_DOWN
from django_taskrunner.store.streams import Broker
from django_taskrunner.worker.interrupt import terminate as stop_attempt

if TYPE_CHECKING:
    from django_taskrunner.worker.running import Attempt, RunningSet

logger = logging.getLogger(__name__)

# A notice of a message this worker does not hold (a cancel whose entry is not known) is
# kept this long, in case the message reaches this worker later; the cancelled set read
# with each fetch covers the rest.
NOTICE_KEEP_S = 600.0
# Seconds between attempts to subscribe again after the connection dropped.
RECONNECT_S = 0.5


class CancelBook:
    """What this worker heard was cancelled, and which fetched messages passed the skip
    step (they start, or started): one lock over both, so a notice either marks a message
    before its skip step or finds it started."""

    def __init__(self, running: RunningSet) -> None:
        self.running = running
        self._lock = threading.Lock()
        self._noticed: dict[str, dict[str, float]] = {}  # shard -> member -> when heard
        self._passed: set[tuple[str, str]] = set()  # (shard, stream id) not skipped
        self._late: set[tuple[str, str]] = set()  # passed, cancelled before registered
        self._late_terminate: set[tuple[str, str]] = set()  # ...with terminate=True
        self._pruned = clock.monotonic()

    def should_skip(
        self, shard: str, stream_id: str, member: str, fetched: AbstractSet[str],
    ) -> bool:
        """The skip step's decision: True when `member` was cancelled (the cancelled set
        `fetched` by the last read, or a notice); otherwise the message counts as started."""
        with self._lock:
            noticed = self._noticed.get(shard)
            if member in fetched or (noticed is not None and member in noticed):
                if noticed is not None:
                    noticed.pop(member, None)
                return True
            self._passed.add((shard, stream_id))
            return False

    def started(self, attempt: Attempt) -> None:
        """An attempt was registered: one cancelled since its skip step is told now."""
        where = (attempt.shard, attempt.stream_id)
        with self._lock:
            late = where in self._late
            terminate = where in self._late_terminate
            self._late.discard(where)
            self._late_terminate.discard(where)
        if late:
            attempt.cancelled_by_request()
        if terminate:
            stop_attempt(attempt)  # before it enters its task: it raises there

    def finished(self, shard: str, stream_id: str) -> None:
        """The message is settled here (or given up on)."""
        with self._lock:
            self._passed.discard((shard, stream_id))
            self._late.discard((shard, stream_id))
            self._late_terminate.discard((shard, stream_id))

    def notice(self, shard: str, stream_id: str, member: str, task_id: str,
               terminate: bool = False) -> str:
        """A cancel of (`shard`, `stream_id`), holder `member`: "running" when it passed
        the skip step (its attempt is told, and with `terminate` stopped:
        `worker/interrupt.py`), else "skip" (its skip step will skip it)."""
        with self._lock:
            if stream_id and (shard, stream_id) in self._passed:
                attempt = self._attempt(shard, stream_id)
                if attempt is None:
                    self._late.add((shard, stream_id))
                    if terminate:
                        self._late_terminate.add((shard, stream_id))
                else:
                    self._tell(attempt, terminate)
                return "running"
            self._noticed.setdefault(shard, {})[member] = clock.monotonic()
            self._prune()
        for attempt in self.running.snapshot():  # no entry known: found by id and holder
            if attempt.message.id == task_id and holder_value(attempt.message) == member:
                self._tell(attempt, terminate)
                return "running"
        return "skip"

    @staticmethod
    def _tell(attempt: Attempt, terminate: bool) -> None:
        if not attempt.cancel_requested:
            attempt.cancelled_by_request()
        if terminate:
            stop_attempt(attempt)

    def _attempt(self, shard: str, stream_id: str) -> Attempt | None:
        for attempt in self.running.snapshot():
            if attempt.shard == shard and attempt.stream_id == stream_id:
                return attempt
        return None

    def _prune(self) -> None:
        """Forget notices older than `NOTICE_KEEP_S` (at most once a minute)."""
        now = clock.monotonic()
        if now - self._pruned < 60:
            return
        self._pruned = now
        for shard, members in list(self._noticed.items()):
            for member, heard in list(members.items()):
                if now - heard > NOTICE_KEEP_S:
                    del members[member]
            if not members:
                del self._noticed[shard]


class CancelListener(threading.Thread):
    """The worker's subscriber to the cancels channel: one connection per process."""

    def __init__(self, broker: Broker, consumer: str, book: CancelBook) -> None:
        super().__init__(name="taskrunner-cancels", daemon=True)
        self.records = broker.records
        self.consumer = consumer
        self.book = book
        self.channel = keys.cancel_channel(broker.prefix)
        self.subscribed = threading.Event()
        self._stopping = threading.Event()

    def run(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            subscription = None
            try:
                subscription = self.records.subscription()
                subscription.subscribe([self.channel])
                self.subscribed.set()
                failures = 0
                while not self._stopping.is_set():
                    got = subscription.next_message(timeout=0.2)
                    if got is not None:
                        self.handle(got[1])
            except REDIS_DOWN as exc:
                failures += 1
                if failures == 1:
                    logger.warning("cancel notices: connection lost (%s); subscribing again, "
                                   "the heartbeat reads cancels meanwhile", exc)
            except Exception:
                logger.exception("cancel notices: listener failed; subscribing again")
            finally:
                self.subscribed.clear()
                if subscription is not None:
                    subscription.close()
            self._stopping.wait(RECONNECT_S)

    def handle(self, data: str) -> None:
        """One notice: `consumer \\n reply key \\n shard \\n stream id \\n member \\n id`,
        and `\\n terminate` for `cancel(id, terminate=True)`."""
        parts = data.split("\n", 6)
        if len(parts) not in (6, 7):
            logger.debug("cancel notices: ignoring a malformed notice %r", data[:200])
            return
        consumer, reply_key, shard, stream_id, member, task_id = parts[:6]
        terminate = len(parts) == 7 and parts[6] == TERMINATE_NOTICE
        if consumer and consumer != self.consumer:
            return  # another worker holds it
        answer = self.book.notice(shard, stream_id, member, task_id, terminate)
        if consumer and reply_key:
            try:
                self.records.answer_cancel(reply_key, answer)
            except REDIS_DOWN as exc:
                logger.info("cancel notices: could not answer for task %s (%s)", task_id, exc)

    def stop(self) -> None:
        self._stopping.set()
        if self.is_alive():
            self.join(2)
