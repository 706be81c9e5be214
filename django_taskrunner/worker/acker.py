"""The acker: the one route by which a finished message leaves the worker.

Every outcome ends here: a success, a failure recorded for good, a message dropped (an
ack), and a retry or a shutdown put-back (a requeue). Both kinds wait in one batch and
go out in one pipelined round trip (`Broker.settle`), with the task records of those
outcomes (`record()`, handed over just before the ack or requeue it goes with).

A requeue stays one atomic script (`requeue.lua`: the new entry and the ack of the old
one together), so there is no moment at which a retried message exists twice or not at
all. If the worker dies before the batch is sent, the old entry is still pending: it is
reclaimed and runs again, as an un-sent ack would (at least once). A requeue onto the
stream (a retry without backoff, a put-back) then gives its record the new entry's
stream id, one more round trip for such a batch only.

The acker never ends but at the exit. A batch Redis cannot take (unreachable, or
refusing writes: OOM, READONLY...) is kept and sent again with backoff; meanwhile
`blocked` stops the worker fetching and starting tasks, and `unsent()` keeps the
waiting messages reserved by the heartbeat. One item whose own key is corrupt is left
out of its batch, logged with its key (store/streams.py), and the rest goes through.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from django_taskrunner.core.records import entry_record
from django_taskrunner.store.connection import text
from django_taskrunner.store.errors import REDIS_ERROR, stalls_writes
from django_taskrunner.store.limits import Slot
from django_taskrunner.store.records import RecordWrite, holder_of
from django_taskrunner.store.streams import Broker, Requeue
from django_taskrunner.store.workflows import MemberDone
from django_taskrunner.worker.outage import RedisStatus, backoff

logger = logging.getLogger(__name__)

# Acks wait at most this long (or until this many finished) to share a round trip.
ACK_LINGER_S = 0.010
ACK_BATCH = 100
# Failed sends at exit before the acker gives up (the messages stay pending, for reclaim).
EXIT_TRIES = 3
# An unexpected error sending a batch (not an outage) is logged on the first try and then
# on every this many.
LOG_EVERY = 10
T = TypeVar("T")


@dataclass
class Batch:
    """Acks per stream, requeues and task records, sent together (`size` counts the
    acks and requeues: a record always comes with one of them)."""

    acks: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    requeues: list[Requeue] = field(default_factory=list)
    records: list[RecordWrite] = field(default_factory=list)
    size: int = 0
    # Workflow members' completions, sent after the records (an ack follows each too).
    workflows: list[MemberDone] = field(default_factory=list)
    releases: list[Slot] = field(default_factory=list)  # concurrency slots to free


class Acker(threading.Thread):
    """Sends finished messages' acks and requeues in batches: all that finished
    meanwhile, one round trip.

    The first of a batch wakes the acker, which then lingers `ACK_LINGER_S` to collect
    more (or until `ACK_BATCH` wait): one round trip and one thread switch for many
    tasks instead of one per task, for at most 10 ms of delay.
    """

    def __init__(
        self, broker: Broker, consumer: str, status: RedisStatus | None = None,
        on_requeued: Callable[[], None] | None = None, confirm: Callable[[], bool] | None = None,
    ) -> None:
        super().__init__(name="taskrunner-acker", daemon=True)
        self.broker = broker
        self.consumer = consumer
        # Its own outage log: reads may work while writes are refused (OOM), so the
        # worker's reachability says nothing of whether acks go through.
        self.status = status or RedisStatus(
            meanwhile="this worker fetches and starts no task until they go through; "
                      "running tasks go on, their acks wait",
            back="finished tasks are acked again", writes_back="finished tasks are acked again")
        self._blocked = threading.Event()
        self._unexpected = False  # an unexpected error was logged: log its end too
        self.on_requeued = on_requeued  # told after a batch with requeues was sent
        self._batch = Batch()
        self._sending = 0  # size of the batch being sent
        self._in_flight: Batch | None = None  # the batch being sent
        self._lock = threading.RLock()  # per task: `with self._lock` skips Condition's Python
        self._cond = threading.Condition(self._lock)
        self._stopping = False
        # False once this worker is known to have been declared lost (worker/lost_workers.py):
        # its acks and records are dropped, only its (ownership-checked) requeues go out.
        self.confirm: Callable[[], bool] = confirm or (lambda: True)

    def add(self, shard: str, stream_id: str) -> None:
        """Ack (and delete) `stream_id` of `shard`: the message is done."""
        with self._lock:
            self._batch.acks[shard].append(stream_id)
            self._added()

    def record(self, write: RecordWrite) -> None:
        """Write a task record with the next batch (the ack or requeue it goes with
        follows at once)."""
        with self._lock:
            self._batch.records.append(write)

    def workflow(self, done: MemberDone) -> None:
        """Count a workflow member's completion with the next batch (its ack follows)."""
        with self._lock:
            self._batch.workflows.append(done)

    def release(self, slots: tuple[Slot, ...]) -> None:
        """Free concurrency slots with the next batch (the attempt's ack or requeue
        follows at once)."""
        with self._lock:
            self._batch.releases.extend(slots)

    def requeue(self, shard: str, stream_id: str, body: str | bytes, due_ms: int = 0) -> None:
        """Move held `stream_id` back to `shard` with `body` (at `due_ms`, 0: now), and ack it."""
        record = entry_record(body, shard, due_ms or None)  # None for most messages
        with self._lock:
            self._batch.requeues.append(Requeue(shard, stream_id, body, due_ms, record))
            self._added()

    def _added(self) -> None:
        self._batch.size += 1
        if self._batch.size == 1 or self._batch.size == ACK_BATCH:
            self._cond.notify()

    def _take(self) -> Batch | None:
        """The next batch to send; None once stopping with nothing left."""
        with self._lock:
            while not self._batch.size and not self._stopping:
                self._cond.wait()
            if not self._batch.size:
                return None
            if self._batch.size < ACK_BATCH and not self._stopping:
                self._cond.wait(ACK_LINGER_S)
            batch, self._batch = self._batch, Batch()
            self._sending = batch.size
            self._in_flight = batch
            return batch

    def unsent(self) -> set[tuple[str, str]]:
        """(queue, stream id) of every message whose ack or requeue is not sent yet: still
        this worker's, and kept reserved by its heartbeat (a Redis refusing writes can
        hold them for long: no other worker, nor this one's reclaimer, may take them)."""
        with self._lock:
            batches = [self._batch] + ([self._in_flight] if self._in_flight else [])
            return {*((queue, stream_id) for batch in batches
                      for queue, ids in batch.acks.items() for stream_id in ids),
                    *((requeue.queue, requeue.stream_id) for batch in batches
                      for requeue in batch.requeues)}

    def idle(self) -> bool:
        """True when nothing waits to be sent and nothing is being sent."""
        with self._lock:
            return not self._batch.size and not self._sending

    @property
    def blocked(self) -> bool:
        """True while batches cannot be sent (Redis unreachable or refusing writes, or a
        batch that failed otherwise): the worker fetches and starts no task meanwhile."""
        return self._blocked.is_set()

    def wait_open(self, stopping: threading.Event) -> None:
        """Wait while `blocked` (or until `stopping`): a task is not started while its
        outcome could not be acked; its message stays held (the heartbeat keeps it)."""
        while self._blocked.is_set() and not stopping.is_set():
            stopping.wait(0.05)

    def run(self) -> None:
        while (batch := self._take()) is not None:
            if not self.confirm():
                batch = _abandoned(batch)
            if batch.size and not self._send(batch):
                with self._lock:
                    left = batch.size + self._batch.size
                logger.error("giving up on %d acks at exit; those tasks will be delivered "
                             "again", left)
                return
            if (batch.requeues or batch.workflows) and self.on_requeued is not None:
                self.on_requeued()  # before idle() can be true: burst mode reads again
            with self._lock:
                self._sending = 0
                self._in_flight = None

    def _send(self, batch: Batch) -> bool:
        """Send `batch` until it went (True), or until giving up at exit (False).

        Nothing makes this thread end but the exit: a Redis that cannot take the batch
        (unreachable, refusing writes) is waited for with backoff, logged once when it
        begins and once when it ends; any other error (a bug) is logged, and the batch
        kept and sent again. Meanwhile `blocked` holds the worker's fetchers and pool.
        """
        return self._until_sent(lambda: self.flush(batch), batch) is not None

    def _until_sent(self, call: Callable[[], T], batch: Batch) -> T | None:
        """`call()`'s result, tried again with backoff until it works (None: given up
        at exit); `blocked` is set from its first failure to its success."""
        failures = 0
        while True:
            try:
                result = call()
            except Exception as exc:  # noqa: BLE001 - the acker must outlive any error
                failures += 1
                self._failed(exc, failures, batch)
                if self._pause(backoff(failures), failures):
                    return None
                continue
            if failures:
                self._blocked.clear()
                self.status.succeeded(wrote=True)
                if self._unexpected:
                    logger.warning("finished tasks are acked again")
                    self._unexpected = False
            return result

    def _failed(self, exc: BaseException, failures: int, batch: Batch) -> None:
        """Note a failed send: the worker stops fetching; logged once per outage (and
        every `LOG_EVERY` tries of an unexpected error)."""
        self._blocked.set()
        if stalls_writes(exc):
            self.status.failed(exc, f"acking {batch.size} finished task(s)")
            return
        if failures == 1 or failures % LOG_EVERY == 0:
            self._unexpected = True
            logger.exception("could not ack %d finished task(s) (try %d); the batch is kept "
                             "and sent again, and this worker fetches and starts no task "
                             "until it goes", batch.size, failures)

    def _pause(self, seconds: float, failures: int) -> bool:
        """Wait before sending again (a stop cuts it short); True: give up, at exit."""
        with self._lock:
            self._cond.wait(seconds)
            return self._stopping and failures > EXIT_TRIES

    def flush(self, batch: Batch) -> bool:
        """Send one batch (one round trip; two when a corrupt task record is written
        again alone, one more with requeues onto a stream, whose records learn their new
        stream id); True once sent (sending it again is safe).

        An item Redis could not apply because of its own key (`Unsettled`) is logged
        with its key; the rest of the batch went through, the item's entry acked."""
        settled = self.broker.settle(self.consumer, batch.acks, batch.requeues,
                                     batch.records, batch.releases,
                                     members_done=batch.workflows)
        for item in settled.unsettled:
            logger.error("could not apply the %s %s while acking finished tasks (%s); it "
                         "is left as it is, the rest of the batch went through", item.what,
                         item.key, item.error)
        moved = [entry for requeue, reply in zip(batch.requeues, settled.requeued, strict=True)
                 if requeue.due_ms == 0 and (entry := _requeued(requeue.body, reply))]
        if moved:  # applied: only this step is tried again (a requeue is not sent twice)
            self._until_sent(lambda: self._set_stream_ids(moved), batch)
        return True

    def _set_stream_ids(self, moved: list[tuple[str, str, str]]) -> bool:
        """Give requeued messages' records their new stream ids; a corrupt record is
        logged and left (an outage is raised: sent again)."""
        try:
            self.broker.records.set_stream_ids(moved)
        except REDIS_ERROR as exc:
            if stalls_writes(exc):
                raise
            logger.error("could not give %d requeued task record(s) their new stream id "
                         "(%s: %s); left as they are", len(moved), type(exc).__name__, exc)
        return True

    def stop(self) -> None:
        """Send what is waiting, then end."""
        with self._lock:
            self._stopping = True
            self._cond.notify()
        self.join()


def _abandoned(batch: Batch) -> Batch:
    """What a worker declared lost still sends of a batch: its requeues, which move only
    entries still its own (`requeue.lua`); no ack (an entry taken by another worker would
    be acked under it), no task record and no concurrency slot (the task may be running
    elsewhere now under the same holder: the slot expires)."""
    if batch.acks or batch.records or batch.workflows:
        logger.warning("this worker was declared lost: %d ack(s) and %d task record(s) not "
                       "sent (those messages belong to other workers now)",
                       sum(len(ids) for ids in batch.acks.values()), len(batch.records))
    return Batch(requeues=batch.requeues, size=len(batch.requeues))


def _requeued(body: str | bytes, reply: object) -> tuple[str, str, str] | None:
    """(task id, holder value, new stream id) of a message `requeue.lua` put on the
    stream; None when it did not (not ours any more) or the body is not a message."""
    if not isinstance(reply, bytes | str):
        return None
    try:
        data = json.loads(body)
    except (TypeError, ValueError):
        return None
    task_id = data.get("id") if isinstance(data, dict) else None
    if not isinstance(task_id, str):
        return None
    token = data.get("tok")
    return task_id, holder_of(task_id, token if isinstance(token, str) else ""), text(reply)
