"""The queues' streams (`Store.streams`, a `Broker`): keys and commands, no knowledge
of tasks.

Each method is one round trip. Bodies are opaque strings (the wire JSON); the stream
entry holds them in a single field, `m`.

A `queue` argument names one stream with its delayed set: a queue, or one shard of a
queue split into several (`"emails#2"`, see core/sharding.py); the broker does not care which.

Recovering pending entries: who holds what for how long (XPENDING), reclaiming the
idle ones of dead or stuck consumers (XCLAIM), and clearing what is left (XACK of deleted
entries, idle consumers): what the reclaimer (worker/reclaim.py) asks of the broker.
Redis outage errors pass through unchanged.

The acker's batch (`Broker.settle`) in one pipelined round trip, each item's error
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

from redis.exceptions import ResponseError

from django_taskrunner.store import keys, scripts, server
from django_taskrunner.store.connection import text, thread_connections
from django_taskrunner.store.entries import entry_body
from django_taskrunner.store.errors import refuses_writes
from django_taskrunner.store.fair import FAIR_QUEUE_TTL_S
from django_taskrunner.store.limits import RENEW_SCRIPT, Limits, Slot
from django_taskrunner.store.records import (
    ADD_SCRIPTS,
    NEW_SCRIPTS,
    SCRIPTS,
    Records,
    RecordWrite,
)
from django_taskrunner.store.workflows import SCRIPTS as WORKFLOW_SCRIPTS
from django_taskrunner.store.workflows import MemberDone

if TYPE_CHECKING:
    from django_taskrunner.store import Store

# An entry as read: (stream id, body or None when the entry was deleted meanwhile).
Entry = tuple[str, bytes | None]
# Scripts a batch queues as bare EVALSHAs, loaded when the server answers NOSCRIPT: the
# heartbeat's (`hold`) and the acker's put-backs (`requeue`).
HOLD_SCRIPTS = ("hold",)
REQUEUE_SCRIPTS = ("requeue",)


@dataclass(frozen=True)
class Pending:
    """One row of XPENDING: who holds an entry, for how long, delivered how often."""

    stream_id: str
    consumer: str
    idle_ms: int
    deliveries: int


@dataclass(frozen=True)
class Claim:
    """An entry to reclaim if still idle for `min_idle_ms`, keeping its delivery counter."""

    stream_id: str
    min_idle_ms: int
    deliveries: int


@dataclass(frozen=True)
class Requeue:
    """A held entry to move back, with `body`, to its stream (`due_ms` 0) or delayed set;
    with `record`, the task's record is written first unless it exists (a message whose
    task id names its entry, moved before any worker recorded it: `Records.save_new`)."""

    queue: str
    stream_id: str
    body: str | bytes
    due_ms: int = 0
    record: RecordWrite | None = None


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


class Broker:
    """Streams operations for one consumer group on the client and key prefix of `store`
    (its `streams`), the recovery of pending entries among them. A broker is built by its
    `Store`, whose other parts it reaches."""

    def __init__(self, store: Store, group: str, delete_on_ack: bool = True) -> None:
        self.store = store
        self.client = store.client
        self.prefix = store.prefix
        self.group = group
        self.delete_on_ack = delete_on_ack
        # A dispatch's one command and a worker's fetches, on the calling thread's own
        # connection (batches too, through `scripts.execute_loading`).
        self.own_connections = thread_connections(store.client)

    @property
    def records(self) -> Records:
        """The task records of this broker's store."""
        return self.store.records

    def add(self, queue: str, body: str, record: RecordWrite | None = None) -> str:
        """XADD one message; returns its stream id. With `record`, its task record is
        written with that stream id: in the same script on one server (`record_add_one.lua`),
        in the round trip after the XADD on a cluster (another slot: `Records.save_new`)."""
        if record is None:  # execute_command, not xadd(): skips building its options
            return text(self.own_connections.execute_command(
                "XADD", self.stream(queue), "*", keys.ENTRY_FIELD, body))
        if not self.records.clustered:
            return text(self.records.add(self.stream(queue), body, record))
        stream_id = text(self.client.xadd(self.stream(queue), {keys.ENTRY_FIELD: body}))
        self.records.save_new([(record, stream_id)])
        return stream_id

    def add_many(
        self, queue: str, bodies: Sequence[str], records: Sequence[RecordWrite] = (),
    ) -> list[str]:
        """XADD many messages in one pipelined round trip.

        `records`: none, or one per body in the same order; each record keeps its
        message's stream id: `record_add.lua` per message on one server, the round trip
        after the XADDs on a cluster (`Records.save_new`)."""
        if records and not self.records.clustered:
            return self._add_recorded([(queue, body) for body in bodies], records)
        pipe = self.client.pipeline(transaction=False)
        stream = self.stream(queue)
        # execute_command, not pipe.xadd(): skips building and checking xadd's options
        # for every message of the batch.
        command = pipe.execute_command
        for body in bodies:
            command("XADD", stream, "*", keys.ENTRY_FIELD, body)
        stream_ids = [text(stream_id) for stream_id in pipe.execute()]
        self.records.save_new(list(zip(records, stream_ids, strict=True)) if records else [])
        return stream_ids

    def add_each(
        self, entries: Sequence[tuple[str, str]], records: Sequence[RecordWrite] = (),
    ) -> list[str]:
        """XADD each (queue or shard, body) in one pipelined round trip (any slots),
        with their `records` (none, or one per entry, as `add_many`)."""
        if records and not self.records.clustered:
            return self._add_recorded(entries, records)
        pipe = self.client.pipeline(transaction=False)
        for queue, body in entries:
            pipe.xadd(self.stream(queue), {keys.ENTRY_FIELD: body})
        stream_ids = [text(stream_id) for stream_id in pipe.execute()]
        self.records.save_new(list(zip(records, stream_ids, strict=True)) if records else [])
        return stream_ids

    def _add_recorded(
        self, entries: Sequence[tuple[str, str]], records: Sequence[RecordWrite],
    ) -> list[str]:
        """`record_add.lua` for the (queue, body) entries and their records, one pipeline."""
        streams = {queue: self.stream(queue) for queue, _body in entries}  # a batch has few
        adds = [(streams[queue], body, record)
                for (queue, body), record in zip(entries, records, strict=True)]
        replies = scripts.execute_loading(
            self.client, lambda pipe: self.records.queue_adds(pipe, adds), ADD_SCRIPTS)
        return [text(stream_id) for reply in replies for stream_id in reply]

    def ensure_group(self, queue: str) -> None:
        """Create the consumer group (and the stream) unless they exist.

        The group starts at id 0, so messages dispatched before any worker ran are read.
        """
        try:
            self.client.xgroup_create(self.stream(queue), self.group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def read(self, queue: str, consumer: str, count: int, block_ms: int | None) -> list[Entry]:
        """New messages for `consumer` (XREADGROUP ... >), blocking up to `block_ms`."""
        stream = self.stream(queue)
        try:
            reply = self.client.xreadgroup(
                self.group, consumer, {stream: ">"}, count=count, block=block_ms
            )
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            # The stream was deleted (by hand, or a Redis restart without persistence).
            self.ensure_group(queue)
            return []
        return _entries(queue, reply)

    def read_checked(
        self, queue: str, consumer: str, count: int, block_ms: int | None,
    ) -> tuple[list[Entry], set[str]]:
        """`read()`, and then the ids cancelled on this stream (SMEMBERS of its cancelled
        set, `keys.cancelled_key`) in the same round trip, on the calling thread's own
        connection (a fetcher's): read after the XREADGROUP returned, so a cancel made
        before a message was read is seen with it."""
        read, cancelled = self.read_checked_many([queue], consumer, count, block_ms)
        return read.get(queue, []), cancelled

    def read_checked_many(
        self, queues: Sequence[str], consumer: str, count: int, block_ms: int | None,
    ) -> tuple[dict[str, list[Entry]], set[str]]:
        """`read_checked()` of several streams of one shard (its priority levels) in one
        XREADGROUP: up to `count` entries from each stream that has some, by name, and
        the shard's cancelled ids (one set for all its levels)."""
        names = {self.stream(queue): queue for queue in queues}
        block = () if block_ms is None else ("BLOCK", block_ms)
        batch = self.own_connections.batch()
        batch.execute_command("XREADGROUP", "GROUP", self.group, consumer, "COUNT", count,
                              *block, "STREAMS", *names, *(">",) * len(names))
        self.records.queue_cancelled(batch, queues[0])
        reply, cancelled = self.own_connections.send_batch(batch)
        if isinstance(reply, ResponseError):
            if "NOGROUP" not in str(reply):
                raise reply
            # A stream was deleted (by hand, or a Redis restart without persistence).
            for queue in queues:
                self.ensure_group(queue)
            return {}, set()
        if isinstance(cancelled, Exception):
            raise cancelled
        streams = (reply or {}).items() if isinstance(reply, dict) else (reply or [])
        read = {}
        for stream, entries in streams:
            if isinstance(reply, dict) and entries and entries[0] and isinstance(
                    entries[0][0], tuple):
                entries = entries[0]  # redis-py's RESP3 callback wraps them: [[(id, fields)]]
            name = names[text(stream)]
            read[name] = _with_bodies(name, entries)
        return read, {text(task_id) for task_id in cancelled}

    def levels_in_use(self, shards: Sequence[str]) -> dict[str, list[str]]:
        """Every stream of each shard, highest priority first: its own (level 5) and each
        level whose stream or delayed set exists (EXISTS of each, one pipeline)."""
        return levels_in_use(self.client, self.prefix, shards)

    def ack(self, queue: str, stream_ids: Sequence[str], pipe: Any = None) -> None:
        """XACK (and XDEL when DELETE_ON_ACK) the given entries, in one round trip.

        Acking and deleting is one XACKDEL where the server has it (Redis 8.2+).
        """
        if not stream_ids:
            return
        own = pipe is None
        pipe = self.client.pipeline(transaction=False) if own else pipe
        stream = self.stream(queue)
        if self.delete_on_ack and server.features(self.client).xackdel:
            pipe.execute_command("XACKDEL", stream, self.group, "IDS", len(stream_ids),
                                 *stream_ids)
        else:  # execute_command: a settle batch may be a thread connection's, not a pipeline
            pipe.execute_command("XACK", stream, self.group, *stream_ids)
            if self.delete_on_ack:
                pipe.execute_command("XDEL", stream, *stream_ids)
        if own:
            pipe.execute()

    def requeue(
        self, queue: str, consumer: str, stream_id: str, body: str | bytes, due_ms: int = 0,
        record: RecordWrite | None = None,
    ) -> str | None:
        """Move a held entry back, with `body`, to the stream (or the delayed set), after
        writing `record` unless the task has one (see `Requeue`).

        Returns None when the entry is no longer ours (another worker reclaimed it).
        """
        if record is not None:
            self.records.save_new([(record, "")])
        result = scripts.run(self.client, "requeue",
                             *self._requeue_call(consumer, Requeue(queue, stream_id, body, due_ms)))
        return None if result is None else text(result)

    def settle(
        self, consumer: str, acks: Mapping[str, Sequence[str]], requeues: Sequence[Requeue],
        record_writes: Sequence[RecordWrite] = (), freed_slots: Sequence[Slot] = (), *,
        members_done: Sequence[MemberDone] = (),
    ) -> Settled:
        """Write what the ended attempts leave (their `record_writes`, the workflow
        members they finished, `members_done`, the concurrency slots they held,
        `freed_slots`), then ack finished entries (`{queue: [stream id, ...]}`, as
        `ack()`) and requeue others (`requeue.lua`, which acks each old entry in the same
        script), all in one pipelined round trip. Each item's error is its own: see
        `settle_batch` below, which also says why sending it again is safe."""
        return settle_batch(self, consumer, acks, requeues, record_writes, freed_slots,
                            members_done)

    def _requeue_call(self, consumer: str, requeue: Requeue) -> tuple[list[str], list[str]]:
        """KEYS and ARGV of `requeue.lua` for one entry."""
        queue = requeue.queue
        return ([self.stream(queue), keys.delayed_key(self.prefix, queue)],
                [self.group, consumer, requeue.stream_id, requeue.body, str(requeue.due_ms),
                 "1" if self.delete_on_ack else "0", keys.wake_channel(self.prefix, queue)])

    def add_delayed(
        self, queue: str, body: str, due_ms: int, record: RecordWrite | None = None,
    ) -> bool:
        """ZADD a message to the delayed set; True when it woke the scheduler. With
        `record`, its task record is written first in the same pipelined round trip."""
        client = self.client if record is None else self.client.pipeline(transaction=False)
        if record is not None:
            self.records.queue_new(client, record)
        woke = scripts.run(
            client, "add_delayed", [keys.delayed_key(self.prefix, queue)],
            [str(due_ms), body, keys.wake_channel(self.prefix, queue)],
        )
        return bool(woke if record is None else client.execute()[-1])

    def promote_due(self, queue: str, now_ms: int, batch: int) -> tuple[int, int | None]:
        """Move up to `batch` due delayed messages to the stream, atomically, then give their
        records the new stream ids; how many moved, the earliest due time left (None: none)."""
        reply = scripts.run(  # a due fair task joins its key's turn (store/fair.py)
            self.client, "promote_due",
            [keys.delayed_key(self.prefix, queue), self.stream(queue),
             keys.fair_ring_key(self.prefix, queue), keys.fair_turns_key(self.prefix, queue),
             keys.fair_queue_key(self.prefix, queue)],
            [str(now_ms), str(batch), keys.fair_list_space(self.prefix, queue),
             str(FAIR_QUEUE_TTL_S)],
        )
        self.records.set_stream_ids(Records.promoted_entries(reply[2:]))  # 1 round trip a batch
        return int(reply[0]), None if int(reply[1]) < 0 else int(reply[1])

    def heartbeat(self, queue: str, consumer: str, stream_id: str) -> bool:
        """Reset the idle time of an entry `consumer` holds; False if it is no longer its."""
        return not self.hold(queue, consumer, [stream_id])

    def hold(
        self, queue: str, consumer: str, stream_ids: Sequence[str], runs: int | None = None,
        pipe: Any = None,
    ) -> list[str]:
        """Heartbeat entries `consumer` still holds (never stealing); returns the lost ids.

        `runs` also sets their delivery counter. With `pipe`, the call is only queued
        and [] returned: the lost ids come with the pipeline's results.
        """
        args = [self.group, consumer, "" if runs is None else str(runs), *stream_ids]
        if pipe is not None:  # a bare EVALSHA: the batch's sender loads it on NOSCRIPT
            scripts.queue(pipe, "hold", [self.stream(queue)], args)
            return []
        return [text(lost) for lost in scripts.run(self.client, "hold", [self.stream(queue)],
                                                   args)]

    def hold_many(
        self, consumer: str, held: Mapping[str, Sequence[str]]
    ) -> dict[str, list[str]]:
        """`hold()` for every queue of `held` (`{queue: [stream id, ...]}`) in one pipelined
        round trip (`hold.lua` per queue); returns the lost ids per queue."""
        def build(pipe: Any) -> None:
            for queue, stream_ids in held.items():
                self.hold(queue, consumer, stream_ids, pipe=pipe)

        replies = scripts.execute_loading(self.client, build, HOLD_SCRIPTS)
        return {queue: [text(lost) for lost in lost_ids]
                for queue, lost_ids in zip(held, replies, strict=True)}

    def hold_and_sync(
        self, consumer: str, held: Mapping[str, Sequence[str]], writes: Sequence[RecordWrite],
        watched: Sequence[str], renewals: Sequence[Slot] = (), buffered: Sequence[str] = (),
    ) -> tuple[dict[str, list[str]], set[str], dict[str, set[str]]]:
        """`hold_many()`, with the running tasks' record writes (started, progress), the
        read of the `watched` ids' cancel flags and of the cancelled sets of the
        `buffered` shards (those holding fetched messages not started yet), in the same
        pipelined round trip; returns the lost ids per queue, the ids found cancelled and
        each buffered shard's cancelled set. `renewals`: the running attempts'
        concurrency slots, their leases pushed on (`Limits`)."""
        store = self.records

        def build(pipe: Any) -> None:
            for queue, stream_ids in held.items():
                self.hold(queue, consumer, stream_ids, pipe=pipe)
            store.queue_writes(pipe, writes)
            Limits.queue_renewals(pipe, renewals)
            store.queue_flags(pipe, watched)
            for shard in buffered:
                store.queue_cancelled(pipe, shard)

        names = (*SCRIPTS, *HOLD_SCRIPTS, *((RENEW_SCRIPT,) if renewals else ()))
        replies = scripts.execute_loading(self.client, build, names)
        lost = {queue: [text(lost) for lost in lost_ids]
                for queue, lost_ids in zip(held, replies, strict=False)}
        sets = replies[len(replies) - len(buffered):] if buffered else []
        flags = replies[len(replies) - len(buffered) - len(watched):len(replies) - len(buffered)]
        cancelled_sets = {shard: {text(member) for member in members}
                          for shard, members in zip(buffered, sets, strict=True)}
        return lost, store.cancelled_ids(watched, flags), cancelled_sets

    def length(self, queue: str) -> int:
        """XLEN of the queue's stream (waiting + pending, + done with DELETE_ON_ACK off)."""
        return int(self.client.xlen(self.stream(queue)))

    # -- recovery of pending entries (the reclaimer) ------------------------------------

    def stream(self, queue: str) -> str:
        """The stream key of a queue, shard or priority level."""
        return keys.stream_key(self.prefix, queue)

    def pending_idle(
        self, queue: str, min_idle_ms: int, start: str, count: int, consumer: str | None = None
    ) -> list[Pending]:
        """Pending entries idle for at least `min_idle_ms`, from `start` on (XPENDING IDLE);
        none while the group does not exist yet (NOGROUP)."""
        try:
            rows = self.client.xpending_range(
                self.stream(queue), self.group, start, "+", count, consumername=consumer,
                idle=min_idle_ms,
            )
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            return []
        return [Pending(text(row["message_id"]), text(row["consumer"]),
                        int(row["time_since_delivered"]), int(row["times_delivered"]))
                for row in rows]

    def bodies(self, queue: str, stream_ids: Sequence[str]) -> dict[str, bytes | None]:
        """The body of each entry, None for one deleted from the stream (one round trip)."""
        pipe = self.client.pipeline(transaction=False)
        for stream_id in stream_ids:
            pipe.xrange(self.stream(queue), stream_id, stream_id)
        found: dict[str, bytes | None] = {}
        for stream_id, entries in zip(stream_ids, pipe.execute(), strict=True):
            found[stream_id] = entry_body(queue, stream_id, entries[0][1]) if entries else None
        return found

    def claim(self, queue: str, consumer: str, claims: Sequence[Claim]) -> list[Entry]:
        """XCLAIM entries idle for at least their own timeout, keeping their delivery counter.

        An entry refreshed by its holder meanwhile is not idle enough and is skipped.
        """
        pipe = self.client.pipeline(transaction=False)
        for claim in claims:
            pipe.xclaim(self.stream(queue), self.group, consumer, claim.min_idle_ms,
                        [claim.stream_id], retrycount=claim.deliveries)
        claimed: list[Entry] = []
        for entries in pipe.execute():
            claimed += _with_bodies(queue, [row for row in entries if row[0] is not None])
        return claimed

    def adopt(self, queue: str, dead: str, alive: str, counters: Mapping[str, int | None]
              ) -> list[str]:
        """Move the entries `dead` still holds to `alive`, keeping their place, and their
        delivery counter or setting it (`{stream id: counter or None to keep}`,
        `adopt.lua`); returns the ids that moved."""
        if not counters:
            return []
        pairs = [part for stream_id, counter in counters.items()
                 for part in (stream_id, "" if counter is None else str(counter))]
        moved = scripts.run(self.client, "adopt", [self.stream(queue)],
                            [self.group, dead, alive, *pairs])
        return [text(stream_id) for stream_id in moved]

    def holders(self, queue: str) -> list[tuple[str, int, int]]:
        """(consumer, entries pending, ms since it last read or claimed) of each consumer
        of the group holding something (XINFO CONSUMERS); none without the group."""
        try:
            rows = self.client.xinfo_consumers(self.stream(queue), self.group)
        except ResponseError:
            return []
        return [(text(row["name"]), int(row["pending"]), int(row["idle"]))
                for row in rows if int(row["pending"])]

    def heartbeat_ages_ms(self, consumers: Sequence[str], now_ms: int) -> dict[str, int | None]:
        """How long ago each worker last wrote its heartbeat (`keys.worker_key`), in ms,
        by the server's clock: the TTL that write gave the hash (field `ttl`, seconds)
        less what is left of it (PTTL), so hosts whose clocks disagree still agree on it.
        A heartbeat without `ttl` (an earlier release's) is aged by its `seen` field
        (the worker's clock) against `now_ms`. None: no heartbeat (it expired, the worker
        is gone). A worker whose heartbeat cannot be read (a key of another type) is left
        out: nobody can tell its age."""
        pipe = self.client.pipeline(transaction=False)
        for consumer in consumers:
            key = keys.worker_key(self.prefix, consumer)
            pipe.hmget(key, "ttl", "seen")
            pipe.pttl(key)
        replies = pipe.execute(raise_on_error=False)
        ages: dict[str, int | None] = {}
        for consumer, fields, left_ms in zip(consumers, replies[::2], replies[1::2],
                                             strict=True):
            if not isinstance(fields, Exception) and not isinstance(left_ms, Exception):
                ages[consumer] = _heartbeat_age(fields, left_ms, now_ms)
        return ages

    def mark_lost(self, consumer: str, cause: str, ttl_s: int) -> None:
        """Say that `consumer` was declared lost (`keys.lost_mark_key`), before its
        messages are taken: if it comes back, it reads this and stops acking."""
        self.client.set(keys.lost_mark_key(self.prefix, consumer), cause, ex=ttl_s)

    def lost_mark(self, consumer: str) -> str | None:
        """Why `consumer` was declared lost; None when it was not (or it started again)."""
        cause = self.client.get(keys.lost_mark_key(self.prefix, consumer))
        return None if cause is None else text(cause)

    def clear_lost_mark(self, consumer: str) -> None:
        """A worker starting under `consumer` holds nothing yet: an old mark is not its."""
        self.client.delete(keys.lost_mark_key(self.prefix, consumer))

    def drop_consumer(self, queue: str, consumer: str) -> bool:
        """Remove `consumer` from the group if it holds nothing (`drop_consumer.lua`);
        False when it holds entries or the group does not exist."""
        try:
            return bool(scripts.run(self.client, "drop_consumer", [self.stream(queue)],
                                    [self.group, consumer]))
        except ResponseError as exc:
            if "NOGROUP" in str(exc):
                return False
            raise

    def forget(self, queue: str, stream_ids: Sequence[str]) -> None:
        """XACK entries deleted from the stream while pending: there is nothing to run."""
        if stream_ids:
            self.client.xack(self.stream(queue), self.group, *stream_ids)

    def delete_idle_consumers(self, queue: str, min_idle_ms: int, keep: str) -> list[str]:
        """Remove consumers holding nothing and idle for `min_idle_ms`; returns their names."""
        try:
            removed = scripts.run(self.client, "delete_idle_consumers", [self.stream(queue)],
                                  [self.group, str(min_idle_ms), keep])
        except ResponseError as exc:
            if "NOGROUP" in str(exc) or "no such key" in str(exc):
                return []
            raise
        return [text(name) for name in removed]

    def pending(self, queue: str) -> int:
        """Messages delivered to some worker and not yet acked."""
        try:
            summary = self.client.xpending(self.stream(queue), self.group)
        except ResponseError:
            return 0
        return int(summary["pending"])


def levels_in_use(client: Any, prefix: str, shards: Sequence[str]) -> dict[str, list[str]]:
    """`Broker.levels_in_use`, for any client (the admin's browser too)."""
    probes = [(shard, name) for shard in shards for name in keys.level_names(shard)]
    pipe = client.pipeline(transaction=False)
    for _shard, name in probes:
        pipe.exists(keys.stream_key(prefix, name), keys.delayed_key(prefix, name))
    found = pipe.execute() if probes else []
    streams: dict[str, list[str]] = {shard: [shard] for shard in shards}
    for (shard, name), hits in zip(probes, found, strict=True):
        if hits:
            streams[shard].append(name)
    return {shard: keys.by_level(names) for shard, names in streams.items()}


def _entries(queue: str, reply: Any) -> list[Entry]:
    """The entries of one stream's XREADGROUP reply (RESP2 list or RESP3 dict)."""
    if not reply:
        return []
    entries = reply[0][1] if isinstance(reply, list) else next(iter(reply.values()))[0]
    return _with_bodies(queue, entries)


def _with_bodies(queue: str, rows: Any) -> list[Entry]:
    """(stream id, body) of each (id, fields) row read from `queue`'s stream (a queue,
    shard or level name), the body with its task id put in (`entries.entry_body`); None
    for an entry deleted while pending."""
    found = []
    for stream_id, fields in rows:
        sid = text(stream_id)
        found.append((sid, entry_body(queue, sid, fields)))
    return found


def _heartbeat_age(fields: list[Any], left_ms: int, now_ms: int) -> int | None:
    """`Broker.heartbeat_ages_ms` of one worker from its HMGET ttl seen and its PTTL."""
    if left_ms == -2:  # no key
        return None
    ttl_s, seen = (text(field) if field is not None else "" for field in fields)
    if ttl_s.isdigit() and left_ms >= 0:
        return max(0, int(ttl_s) * 1000 - left_ms)
    return now_ms - int(seen) if seen.isdigit() else None


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
        write_moved_records(spans, pipe, broker, requeues)
        # After the records: a workflow's next step reads its parents' results.
        count_workflow_members(spans, pipe, broker, members_done)
        free_concurrency_slots(spans, pipe, freed_slots)
        ack_entries(spans, pipe, broker, acks)
        requeue_entries(spans, pipe, broker, consumer, requeues)

    scripts_used = (*SCRIPTS, *REQUEUE_SCRIPTS, *(WORKFLOW_SCRIPTS if members_done else ()),
                    *(NEW_SCRIPTS if any(requeue.record for requeue in requeues) else ()))
    replies = _send(broker.own_connections, build, scripts_used)
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


def write_moved_records(spans: list[_Span], pipe: Any, broker: Broker,
                        requeues: Sequence[Requeue]) -> None:
    """Queue the records of moved messages no worker recorded yet (`Requeue.record`),
    before their moves: whole where missing, else only the fields they lack; one item.
    The requeue's own reply gives the stream id after (`Records.set_stream_ids`)."""
    added = [(requeue.record, "") for requeue in requeues if requeue.record is not None]
    if added:
        with _span(spans, pipe, "moved task records", ""):
            broker.records.queue_saves(pipe, added)


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
            scripts.queue(pipe, "requeue", *broker._requeue_call(consumer, requeue))


def _write_each(broker: Broker, records: Sequence[RecordWrite]) -> list[Unsettled]:
    """Write `records` one per script call (one round trip); those that fail again."""
    spans: list[_Span] = []

    def build(pipe: Any) -> None:
        spans.clear()
        for write in records:
            with _span(spans, pipe, "task record", keys.record_key(broker.prefix,
                                                                   write.task_id)):
                broker.records.queue_writes(pipe, [write])

    replies = _send(broker.own_connections, build, SCRIPTS)
    return [Unsettled(span.what, span.key, str(error)) for span in spans
            if (error := _error_in(replies[span.start:span.end])) is not None]


def _send(sender: Any, build: Callable[[Any], None], names: Sequence[str]) -> list[Any]:
    """Send the batch `build(pipe)` makes on `sender` (the broker's `own_connections`),
    each error kept as its reply; after NOSCRIPT (a restarted or flushed server) load
    `names` and send it once more. A reply of a server refusing writes is raised (the
    batch was not all applied)."""
    replies = scripts.send_loading(sender, build, names)
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
