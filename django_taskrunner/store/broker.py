"""A thin Redis Streams adapter: keys and commands, no knowledge of tasks.

Each method is one round trip. Bodies are opaque strings (the wire JSON); the stream
entry holds them in a single field, `m`.

A `queue` argument names one stream with its delayed set: a queue, or one shard of a
queue split into several (`"emails#2"`, see core/sharding.py); the broker does not care which.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis.exceptions import ResponseError

from django_taskrunner.store import keys, scripts, server
from django_taskrunner.store.fair import FAIR_QUEUE_TTL_S
from django_taskrunner.store.limits import RENEW_SCRIPT, Limits, Slot
from django_taskrunner.store.records import ADD_SCRIPTS, SCRIPTS, Records, RecordWrite
from django_taskrunner.store.recovery import Entry, StreamRecovery, body_of
from django_taskrunner.store.settle import Settled, settle_batch
from django_taskrunner.store.values import text
from django_taskrunner.store.workflows import MemberDone

if TYPE_CHECKING:
    from django_taskrunner.store import Store


@dataclass(frozen=True)
class Requeue:
    """A held entry to move back, with `body`, to its stream (`due_ms` 0) or delayed set."""

    queue: str
    stream_id: str
    body: str | bytes
    due_ms: int = 0


class Broker(StreamRecovery):
    """Streams operations for one consumer group on the client and key prefix of `store`
    (its `streams`; the recovery of pending entries: `StreamRecovery`, in
    store/recovery.py). A broker is built by its `Store`, whose other parts it reaches."""

    def __init__(self, store: Store, group: str, delete_on_ack: bool = True) -> None:
        self.store = store
        self.client = store.client
        self.prefix = store.prefix
        self.group = group
        self.delete_on_ack = delete_on_ack

    @property
    def records(self) -> Records:
        """The task records of this broker's store."""
        return self.store.records

    def add(self, queue: str, body: str, record: RecordWrite | None = None) -> str:
        """XADD one message; returns its stream id. With `record`, its task record is
        written with that stream id: in the same script on one server (`record_add.lua`),
        in the round trip after the XADD on a cluster (another slot: `Records.save_new`)."""
        if record is None:  # execute_command, not xadd(): skips building its options
            return text(self.client.execute_command("XADD", self.stream(queue), "*",
                                                    keys.ENTRY_FIELD, body))
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
        adds = [(self.stream(queue), body, record)
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
        return _entries(reply)

    def read_checked(
        self, queue: str, consumer: str, count: int, block_ms: int | None,
    ) -> tuple[list[Entry], set[str]]:
        """`read()`, and then the ids cancelled on this stream (SMEMBERS of its cancelled
        set, `keys.cancelled_key`) in the same pipelined round trip: read after the
        XREADGROUP returned, so a cancel made before a message was read is seen with it."""
        pipe = self.client.pipeline(transaction=False)
        pipe.xreadgroup(self.group, consumer, {self.stream(queue): ">"}, count=count,
                        block=block_ms)
        self.records.queue_cancelled(pipe, queue)
        try:
            reply, cancelled = pipe.execute()
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            self.ensure_group(queue)
            return [], set()
        return _entries(reply), {text(task_id) for task_id in cancelled}

    def read_checked_many(
        self, queues: Sequence[str], consumer: str, count: int, block_ms: int | None,
    ) -> tuple[dict[str, list[Entry]], set[str]]:
        """`read_checked()` of several streams of one shard (its priority levels) in one
        XREADGROUP: up to `count` entries from each stream that has some, by name, and
        the shard's cancelled ids (one set for all its levels)."""
        names = {self.stream(queue): queue for queue in queues}
        pipe = self.client.pipeline(transaction=False)
        pipe.xreadgroup(self.group, consumer, dict.fromkeys(names, ">"), count=count,
                        block=block_ms)
        self.records.queue_cancelled(pipe, queues[0])
        try:
            reply, cancelled = pipe.execute()
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            for queue in queues:
                self.ensure_group(queue)
            return {}, set()
        streams = (reply or {}).items() if isinstance(reply, dict) else (reply or [])
        read = {}
        for stream, entries in streams:
            if isinstance(reply, dict):
                entries = entries[0]
            read[names[text(stream)]] = [(text(stream_id), body_of(fields))
                                         for stream_id, fields in entries]
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
        else:
            pipe.xack(stream, self.group, *stream_ids)
            if self.delete_on_ack:
                pipe.xdel(stream, *stream_ids)
        if own:
            pipe.execute()

    def requeue(
        self, queue: str, consumer: str, stream_id: str, body: str | bytes, due_ms: int = 0
    ) -> str | None:
        """Move a held entry back, with `body`, to the stream (or the delayed set).

        Returns None when the entry is no longer ours (another worker reclaimed it).
        """
        result = self._requeue(self.client, consumer, Requeue(queue, stream_id, body, due_ms))
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
        store/settle.py, which also says why sending it again is safe."""
        return settle_batch(self, consumer, acks, requeues, record_writes, freed_slots,
                            members_done)

    def _requeue(self, client: Any, consumer: str, requeue: Requeue) -> Any:
        """Run (or, on a pipeline, queue) `requeue.lua` for one entry."""
        queue = requeue.queue
        return scripts.run(
            client, "requeue", [self.stream(queue), keys.delayed_key(self.prefix, queue)],
            [self.group, consumer, requeue.stream_id, requeue.body, str(requeue.due_ms),
             "1" if self.delete_on_ack else "0", keys.wake_channel(self.prefix, queue)],
        )

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
        result = scripts.run(pipe if pipe is not None else self.client, "hold",
                             [self.stream(queue)], args)
        return [] if pipe is not None else [text(lost) for lost in result]

    def hold_many(
        self, consumer: str, held: Mapping[str, Sequence[str]]
    ) -> dict[str, list[str]]:
        """`hold()` for every queue of `held` (`{queue: [stream id, ...]}`) in one pipelined
        round trip (`hold.lua` per queue); returns the lost ids per queue."""
        pipe = self.client.pipeline(transaction=False)
        for queue, stream_ids in held.items():
            self.hold(queue, consumer, stream_ids, pipe=pipe)
        return {queue: [text(lost) for lost in lost_ids]
                for queue, lost_ids in zip(held, pipe.execute(), strict=True)}

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

        names = (*SCRIPTS, RENEW_SCRIPT) if renewals else SCRIPTS
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


def _entries(reply: Any) -> list[Entry]:
    """The entries of one stream's XREADGROUP reply (RESP2 list or RESP3 dict)."""
    if not reply:
        return []
    entries = reply[0][1] if isinstance(reply, list) else next(iter(reply.values()))[0]
    return [(text(stream_id), body_of(fields)) for stream_id, fields in entries]
