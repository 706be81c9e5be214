"""The acker's batch (`Broker.settle`) in one pipelined round trip, each item's error
looked at on its own: the writes the ended attempts leave (`write_task_records`,
`count_workflow_members`, `free_concurrency_slots`), then `ack_entries` and
`requeue_entries`.

The pipeline never stops at an error (`raise_on_error=False`):

- a reply of a server refusing writes (`errors.refuses_writes`: OOM at maxmemory,
  READONLY, LOADING, NOSCRIPT once the scripts were loaded again...) is raised, as an
  outage is: the batch was not all applied, and is to be sent again as a whole;
- any other error belongs to its item (a corrupt key: the wrong type, a workflow written
  by another release), which is reported in `Settled.unsettled` while the rest of the
  batch is applied. Task records go 200 to a script call: when such a call fails, its
  records are written again one by one (a second round trip), so that only the corrupt
  one is left out. A workflow `workflow_member.lua` finds corrupt answers "corrupt: ...".

Sending a batch again is safe: an ack is idempotent, a requeue of an entry already acked
finds it no longer pending and does nothing, a workflow member is counted once, a record
write is the same write again. A connection error raised by the pipeline passes through.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis.exceptions import NoScriptError

from django_taskrunner.store import keys, scripts
from django_taskrunner.store.errors import refuses_writes
from django_taskrunner.store.limits import Limits, Slot
from django_taskrunner.store.records import SCRIPTS, RecordWrite
from django_taskrunner.store.values import text
from django_taskrunner.store.workflows import SCRIPTS as WORKFLOW_SCRIPTS
from django_taskrunner.store.workflows import MemberDone

if TYPE_CHECKING:
    from django_taskrunner.store.broker import Broker, Requeue


@dataclass(frozen=True)
class Unsettled:
    """An item of the acker's batch that Redis could not apply because of its own key:
    what it was, the key, and the error. The rest of the batch was applied."""

    what: str
    key: str
    error: str


@dataclass(frozen=True)
class Settled:
    """What a batch did: each requeue's reply (new stream id, "delayed", or None: not put
    back, no longer the consumer's or failed), and the items it could not apply."""

    requeued: list[Any]
    unsettled: list[Unsettled]


@dataclass(frozen=True)
class _Span:
    """The pipeline commands [start, end) of one item of a batch."""

    what: str
    key: str
    start: int
    end: int


def settle_batch(
    broker: Broker, consumer: str, acks: Mapping[str, Sequence[str]],
    requeues: Sequence[Requeue], record_writes: Sequence[RecordWrite],
    freed_slots: Sequence[Slot], members_done: Sequence[MemberDone],
) -> Settled:
    """`Broker.settle`: the batch in one round trip (two when a record call fails)."""
    spans: list[_Span] = []

    def build(pipe: Any) -> None:
        spans.clear()
        write_task_records(spans, pipe, broker, record_writes)
        # After the records: a workflow's next step reads its parents' results.
        count_workflow_members(spans, pipe, broker, members_done)
        free_concurrency_slots(spans, pipe, freed_slots)
        ack_entries(spans, pipe, broker, acks)
        requeue_entries(spans, pipe, broker, consumer, requeues)

    scripts_used = SCRIPTS + WORKFLOW_SCRIPTS if members_done else SCRIPTS
    replies = _send(broker.client, build, scripts_used)
    unsettled: list[Unsettled] = []
    for span in spans:
        error = _error_in(replies[span.start:span.end])
        if span.what == "task records" and error is not None:
            unsettled += _write_each(broker, record_writes)
        elif error is not None:
            unsettled.append(Unsettled(span.what, span.key, str(error)))
        elif span.what == "workflow" and text(replies[span.start]).startswith("corrupt"):
            unsettled.append(Unsettled(span.what, span.key, text(replies[span.start])))
    requeued = [None if isinstance(reply, Exception) else reply
                for reply in replies[len(replies) - len(requeues):]]  # the requeues go last
    return Settled(requeued, unsettled)


def write_task_records(spans: list[_Span], pipe: Any, broker: Broker,
                       writes: Sequence[RecordWrite]) -> None:
    """Queue the attempts' task record writes (`record_write.lua`), one item."""
    with _span(spans, pipe, "task records", ""):
        broker.records.queue_writes(pipe, writes)


def count_workflow_members(spans: list[_Span], pipe: Any, broker: Broker,
                           members_done: Sequence[MemberDone]) -> None:
    """Queue `workflow_member.lua` for each finished workflow member: counts it, and
    sends its workflow's next stage when it was the last of its stage; one item each."""
    workflows = broker.store.workflows
    for done in members_done:
        with _span(spans, pipe, "workflow", keys.workflow_key(broker.prefix, done.workflow_id)):
            workflows.queue_member_done(pipe, [done])


def free_concurrency_slots(spans: list[_Span], pipe: Any, slots: Sequence[Slot]) -> None:
    """Queue the release of the concurrency slots the ended attempts held; one item each."""
    for slot in slots:
        with _span(spans, pipe, "concurrency slot", slot.key):
            Limits.queue_releases(pipe, [slot])


def ack_entries(spans: list[_Span], pipe: Any, broker: Broker,
                acks: Mapping[str, Sequence[str]]) -> None:
    """Queue the XACK (and XDEL) of the finished entries, one item per queue."""
    for queue, stream_ids in acks.items():
        with _span(spans, pipe, "ack on", broker.stream(queue)):
            broker.ack(queue, stream_ids, pipe=pipe)


def requeue_entries(spans: list[_Span], pipe: Any, broker: Broker, consumer: str,
                    requeues: Sequence[Requeue]) -> None:
    """Queue `requeue.lua` for each entry put back, last in the batch; one item each."""
    for requeue in requeues:
        with _span(spans, pipe, "requeue on", broker.stream(requeue.queue)):
            broker._requeue(pipe, consumer, requeue)


def _write_each(broker: Broker, records: Sequence[RecordWrite]) -> list[Unsettled]:
    """Write `records` one per script call (one round trip); those that fail again."""
    spans: list[_Span] = []

    def build(pipe: Any) -> None:
        spans.clear()
        for write in records:
            with _span(spans, pipe, "task record", keys.record_key(broker.prefix,
                                                                   write.task_id)):
                broker.records.queue_writes(pipe, [write])

    replies = _send(broker.client, build, SCRIPTS)
    return [Unsettled(span.what, span.key, str(error)) for span in spans
            if (error := _error_in(replies[span.start:span.end])) is not None]


def _send(client: Any, build: Callable[[Any], None], names: Sequence[str]) -> list[Any]:
    """Execute the pipeline `build(pipe)` makes, each error kept as its reply; after
    NOSCRIPT (a restarted or flushed server) load `names` and send it once more. A reply
    of a server refusing writes is raised (the batch was not all applied)."""
    pipe = client.pipeline(transaction=False)
    build(pipe)
    replies = pipe.execute(raise_on_error=False)
    if any(isinstance(reply, NoScriptError) for reply in replies):
        for name in names:
            client.script_load(scripts.source(name))
        pipe = client.pipeline(transaction=False)
        build(pipe)
        replies = pipe.execute(raise_on_error=False)
    for reply in replies:
        if isinstance(reply, Exception) and refuses_writes(reply):
            raise reply
    return list(replies)


@contextmanager
def _span(spans: list[_Span], pipe: Any, what: str, key: str) -> Iterator[None]:
    """Note which commands the block queues on `pipe` (one item of a batch)."""
    start = len(pipe)
    yield
    spans.append(_Span(what, key, start, len(pipe)))


def _error_in(replies: Sequence[Any]) -> Exception | None:
    """The first error among one item's replies (None: it went through)."""
    return next((reply for reply in replies if isinstance(reply, Exception)), None)
