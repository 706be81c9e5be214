"""Task records: one Redis hash per task id (status, result, progress...), with a TTL;
below them, what else is kept per task id: the results of Django Tasks framework tasks
and the kept results of durable steps.

What a record holds is decided in `core/records.py` (which builds the fields) and in the
worker's record step; this module only runs the commands, on plain values: task ids,
field names and text values, TTLs in seconds. Keys come from `keys.record_key`,
`keys.record_done_key` (tagged by the task id: `lookup(id)` knows nothing else) and
`keys.cancelled_key` (tagged by the shard: its fetcher reads it). Scripts:
`record_write.lua`, `record_watch.lua`, `record_cancel.lua`, `record_new.lua`, each on
one record's two keys; `cancel_entry.lua`, the cancel's second step, in the slot of the
task's shard.

A plain dispatch writes none: its task id names its stream entry, which `load_or_entry`
reads until the worker writes the record (`record_or_entry.lua`). Other writes ride in
round trips their callers already make: the dispatch's (inside
`record_add_one.lua`, `record_add.lua` or `enqueue.lua` on one server, `enqueue_args`; a
delayed message's ZADD pipeline, `queue_new`), the acker's batch (`queue_writes`), the heartbeat's
(`queue_writes`, `queue_flags`). One exception: on a cluster the record of a message
added now follows its XADD in a round trip of its own (`save_new`), since it needs the
stream id the XADD gives. Redis outage errors (`errors.REDIS_DOWN`) pass through every
method unchanged.

The finished index: per queue, the ids of recently finished tasks scored by their
finish time (`keys.finished_key`), which the admin's "finished" list pages through.

A final record write lists its task in the same script (`record_write.lua`, one server)
or right after it in the same pipeline (`record_index.lua`, a cluster); see
`Records.queue_writes`. Here: the pages (the index read a batch at a time, then the
records of those ids), its size, and the listing of a task no worker will write the
final record of. Redis outage errors pass through unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from django_taskrunner.store import entries, keys, scripts
from django_taskrunner.store.connection import WakeSubscription, text, thread_connections

SCRIPTS = ("record_write", "record_index")  # queued as bare EVALSHA: loaded on NOSCRIPT
SID_SCRIPTS = ("record_sid",)  # the same, for `set_stream_ids`
ADD_SCRIPTS = ("record_add",)  # a dispatch_many's, queued the same way
NEW_SCRIPTS = ("record_new",)  # the same, for `save_new` (a cluster's dispatch)
# Records per script call on one server: the script's own cost is paid once per call,
# and a call stays short enough (well under a millisecond) not to hold up other clients.
ADD_BATCH = WRITE_BATCH = 200
FINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled", "expired"})
# How long a set of cancelled ids may wait for its fetcher (a delayed message's due time
# is added): as long as a task id stays reserved.
CANCELLED_TTL_S = 7 * 24 * 3600


@dataclass(slots=True)
class RecordWrite:
    """Fields to write on the record of `task_id`, and the TTL it gets (not frozen: built
    for every outcome, and a frozen dataclass takes three times as long to build).

    `final`: the outcome (a set cancel flag turns it into "cancelled", waiters are
    woken). `uncancel`: a shard whose cancelled set drops `cancel_member` (a skipped
    message's holder value). `steps`: its task may have kept durable steps, which get
    the record's TTL too (`keys.steps_key`); False spares the script that key.
    """

    task_id: str
    fields: tuple[tuple[str, str], ...]
    ttl_s: int
    final: bool = False
    uncancel: str = ""
    cancel_member: str = ""
    steps: bool = False


@dataclass(frozen=True)
class CancelReply:
    """What `record_cancel.lua` found: "unknown", "final" or "ok" (then what to free)."""

    outcome: str
    status: str = ""
    shard: str = ""
    lock_key: str = ""
    holder: str = ""
    has_task_id: bool = False
    stream_id: str = ""


@dataclass(frozen=True)
class EntryCancel:
    """What `cancel_entry.lua` did in the shard's slot: "removed" (the entry deleted, its
    lock freed), "held" (`consumer` fetched it and frees its lock; `idle_ms` since it
    last held it) or "marked" (no entry known: skipped by the cancelled set; `freed`:
    its lock freed now)."""

    outcome: str
    consumer: str = ""
    freed: bool = False
    idle_ms: int = 0


class Records:
    """The task records under one client and key prefix; a final write lists its task in
    the finished index as `limits` say (the settings' defaults when not given)."""

    def __init__(self, client: Any, prefix: str, limits: FinishedLimits | None = None) -> None:
        self.client = client
        self.prefix = prefix
        self.limits = limits or FinishedLimits()
        # A dispatch's one script call, on the calling thread's own connection.
        self.own_connections = thread_connections(client)

    @property
    def clustered(self) -> bool:
        """True on a Redis Cluster, where a record cannot share a script with a queue."""
        return hasattr(self.client, "get_primaries")

    # -- dispatch --------------------------------------------------------------------

    def queue_new(self, pipe: Any, write: RecordWrite) -> None:
        """Queue on `pipe` the first write of a record: HSET its fields, EXPIRE its TTL.

        For a random id (a plain dispatch), which no earlier record can have used.
        """
        key = keys.record_key(self.prefix, write.task_id)
        pipe.execute_command("HSET", key, *_flat(write.fields))
        pipe.execute_command("EXPIRE", key, write.ttl_s)

    def queue_adds(self, pipe: Any, entries: Sequence[tuple[str, str, RecordWrite]]) -> None:
        """Queue `record_add.lua` on `pipe` for each (stream, body, record): XADD the body
        and write the new record with the entry's stream id ('sid'), `ADD_BATCH` messages
        per call (a single server only: see `clustered`). The caller executes with
        `scripts.execute_loading(..., ADD_SCRIPTS)`; each reply is a list of stream ids."""
        for start in range(0, len(entries), ADD_BATCH):
            scripts.queue(pipe, "record_add", *self._add_args(entries[start:start + ADD_BATCH]))

    def add(self, stream: str, body: str, write: RecordWrite) -> Any:
        """`record_add_one.lua`: `record_add.lua` for one message (a `dispatch()` whose
        message carries its id, one round trip), its record's fields as plain arguments
        (no JSON to encode and decode for one record); its stream id."""
        return scripts.run(self.own_connections, "record_add_one",
                           *self._add_one_args(stream, body, write))

    def _add_one_args(self, stream: str, body: str, write: RecordWrite,
                      ) -> tuple[list[str], list[Any]]:
        """KEYS and ARGV of `record_add_one.lua` (see the script)."""
        return ([stream, keys.record_key(self.prefix, write.task_id)],
                [keys.ENTRY_FIELD, body, write.ttl_s, *_flat(write.fields)])

    def _add_args(
        self, entries: Sequence[tuple[str, str, RecordWrite]],
    ) -> tuple[list[str], list[str]]:
        """KEYS and ARGV of `record_add.lua` for `entries` (see the script)."""
        script_keys: list[str] = []
        bodies: list[str] = []
        # The records of a batch are most often alike but for their ids (one task, one
        # queue, one dispatch time): each distinct (TTL, fields) is sent, and decoded by
        # the script, once; each message names its own by position.
        positions: dict[tuple[int, tuple[tuple[str, str], ...]], int] = {}
        which: list[int] = []
        for stream, body, write in entries:
            script_keys += [stream, keys.record_key(self.prefix, write.task_id)]
            which.append(positions.setdefault((write.ttl_s, write.fields), len(positions) + 1))
            bodies.append(body)
        specs = ",".join(_encode([str(ttl_s), _flat(fields)]) for ttl_s, fields in positions)
        return script_keys, [keys.ENTRY_FIELD, f"[{specs}]",
                             "" if len(positions) == 1 else _encode(which), *bodies]

    def save_new(self, added: Sequence[tuple[RecordWrite, str]]) -> None:
        """`record_new.lua` for each (record, stream id of its message's entry, or
        "delayed"), one pipelined round trip: the cluster's record write after the XADD
        or `enqueue.lua` (another slot), with the entry's stream id ('sid'). A record a
        worker already wrote (running, finished) only gains the fields it lacks: it
        never goes back to "queued"; one of an earlier dispatch of the id is replaced."""
        if len(added) == 1:  # one dispatch: a plain EVALSHA, no pipeline to build
            scripts.run(self.client, "record_new", *self._new_args(*added[0]))
        elif added:
            scripts.execute_loading(self.client, lambda pipe: self.queue_saves(pipe, added),
                                    NEW_SCRIPTS)

    def queue_saves(self, pipe: Any, added: Sequence[tuple[RecordWrite, str]]) -> None:
        """Queue `save_new`'s calls on `pipe` (executed with `scripts.execute_loading`,
        `NEW_SCRIPTS`): for a batch that moves messages whose records may not exist yet."""
        for write, stream_id in added:
            scripts.queue(pipe, "record_new", *self._new_args(write, stream_id))

    def _new_args(self, write: RecordWrite, stream_id: str) -> tuple[list[str], list[str]]:
        """KEYS and ARGV of `record_new.lua` (see the script)."""
        return ([keys.record_key(self.prefix, write.task_id),
                 keys.record_done_key(self.prefix, write.task_id)],
                [str(write.ttl_s), "" if stream_id == "delayed" else stream_id,
                 *_flat(write.fields)])

    def enqueue_args(self, write: RecordWrite) -> tuple[list[str], list[str]]:
        """The KEYS and ARGV `enqueue.lua` appends to write the record in its own step
        (a single server only: see `clustered`)."""
        return ([keys.record_key(self.prefix, write.task_id),
                 keys.record_done_key(self.prefix, write.task_id)],
                [str(write.ttl_s), *_flat(write.fields)])

    @staticmethod
    def promoted_entries(reply: Sequence[Any]) -> list[tuple[str, str, str]]:
        """(task id, holder value, stream id) of each message `promote_due.lua` moved
        (its reply past the first two items: id, token and stream id of each)."""
        parts = [text(part) for part in reply]
        return [(parts[i], holder_of(parts[i], parts[i + 1]), parts[i + 2])
                for i in range(0, len(parts) - 2, 3)]

    def set_stream_ids(self, moved: Sequence[tuple[str, str, str]]) -> None:
        """`record_sid.lua` for each (task id, holder value, stream id), one round trip:
        the records of messages a move put on a stream (promoted, requeued, run now)
        learn their entry; a missing, final or later-dispatch record is left. One call
        for them all on a single server, one per record (pipelined) on a cluster."""
        moved = [move for move in moved if move[0]]
        if not moved:
            return
        groups = [[move] for move in moved] if self.clustered else [moved]

        def build(pipe: Any) -> None:
            for group in groups:
                scripts.queue(pipe, "record_sid",
                              [keys.record_key(self.prefix, task_id) for task_id, _, _ in group],
                              [part for _, holder, sid in group for part in (sid, holder)])

        scripts.execute_loading(self.client, build, SID_SCRIPTS)

    # -- worker ----------------------------------------------------------------------

    def queue_writes(self, pipe: Any, writes: Sequence[RecordWrite]) -> None:
        """Queue `record_write.lua` for `writes` on `pipe`, `WRITE_BATCH` records per call
        on one server, one per call on a cluster (their slots differ), each giving the
        task's durable steps (`RecordWrite.steps`) the record's TTL, and SREM of the
        cancelled set each leaves; the caller executes the pipeline with
        `scripts.execute_loading` (the script goes as a bare EVALSHA; replies: the
        statuses now held). A final write also lists its task in its queue's finished
        index (`keys.finished_key`): in the same script on one server, with
        `record_index.lua` right after it on a cluster."""
        keep, result_ttl_s = self.limits.keep, self.limits.result_ttl_s
        size = 1 if self.clustered else WRITE_BATCH
        for start in range(0, len(writes), size):
            script_keys: list[str] = []
            args: list[Any] = []
            for write in writes[start:start + size]:
                script_keys += [keys.record_key(self.prefix, write.task_id),
                                keys.record_done_key(self.prefix, write.task_id)]
                if write.steps:
                    script_keys.append(keys.steps_key(self.prefix, write.task_id))
                index = index_of(write, keep, result_ttl_s)
                indexed = index is not None and not self.clustered
                if indexed:
                    script_keys.append(keys.finished_key(self.prefix, index.queue))
                # Plain arguments, packed by the client in C: a batch's JSON cost more
                # to encode here (every payload and trace escaped) and to decode there.
                args += ["final" if write.final else "update", write.ttl_s,
                         "1" if indexed else "0", keep if index is not None else 0,
                         index.cutoff_ms if index is not None else 0, write.task_id,
                         "1" if write.steps else "0", 2 * len(write.fields)]
                for pair in write.fields:
                    args += pair
            scripts.queue(pipe, "record_write", script_keys, args)
            if self.clustered:
                self._queue_index(pipe, writes[start], keep, result_ttl_s)
        for write in writes:
            if write.uncancel:
                pipe.execute_command("SREM", keys.cancelled_key(self.prefix, write.uncancel),
                                     write.cancel_member or write.task_id)

    def _queue_index(
        self, pipe: Any, write: RecordWrite, keep: int, result_ttl_s: int,
    ) -> None:
        """On a cluster: `record_index.lua` for a final write, right after its record's."""
        index = index_of(write, keep, result_ttl_s)
        if index is not None:
            scripts.queue(pipe, "record_index", [keys.finished_key(self.prefix, index.queue)],
                          [write.task_id, str(index.finished_ms), str(keep),
                           str(index.cutoff_ms), str(write.ttl_s)])

    def write(self, writes: Sequence[RecordWrite]) -> None:
        """`queue_writes` in a pipeline of its own (one round trip)."""
        if writes:
            scripts.execute_loading(self.client, lambda pipe: self.queue_writes(pipe, writes),
                                    SCRIPTS)

    def queue_flags(self, pipe: Any, task_ids: Sequence[str]) -> None:
        """Queue HGET of each record's cancel flag on `pipe` (see `cancelled_ids`)."""
        for task_id in task_ids:
            pipe.execute_command("HGET", keys.record_key(self.prefix, task_id), "c")

    @staticmethod
    def cancelled_ids(task_ids: Sequence[str], replies: Sequence[Any]) -> set[str]:
        """The ids whose `queue_flags` reply says they were cancelled."""
        return {task_id for task_id, flag in zip(task_ids, replies, strict=True)
                if flag is not None and text(flag) == "1"}

    def queue_cancelled(self, pipe: Any, shard: str) -> None:
        """Queue SMEMBERS of a shard's cancelled set (the fetch reads it after XREADGROUP)."""
        pipe.execute_command("SMEMBERS", keys.cancelled_key(self.prefix, shard))

    # -- clients ---------------------------------------------------------------------

    def load(self, task_id: str) -> dict[str, str] | None:
        """HGETALL of the record of `task_id`; None when there is none (or it expired)."""
        return _fields(self.client.hgetall(keys.record_key(self.prefix, task_id)))

    def load_or_entry(self, task_id: str, group: str
                      ) -> tuple[dict[str, str] | None, bytes | None]:
        """(record, None) of `task_id`; for an id that names its stream entry
        (`entries.entry_task_id`) with no record yet, (None, the body of that entry) while it
        waits or a worker of `group` holds it (`record_or_entry.lua`, one call: a worker
        recording and acking it meanwhile cannot make the task look unknown); (None,
        None) for neither. On a cluster no dispatch names its entry: the record only."""
        entry = entries.task_id_entry(task_id)
        if entry is None or self.clustered:
            return self.load(task_id), None
        stream, stream_id = entry
        reply = scripts.run(self.client, "record_or_entry",
                            [keys.record_key(self.prefix, task_id),
                             keys.stream_key(self.prefix, stream)], [stream_id, group])
        kind = int(reply[0])
        if kind == 1:
            return _fields(dict(zip(reply[1::2], reply[2::2], strict=True))), None
        if kind == 2:
            return None, entries.entry_body(stream, stream_id, [keys.ENTRY_FIELD, reply[1]])
        return None, None

    def watch(self, task_id: str) -> dict[str, str] | None:
        """`record_watch.lua`: the record, marked watched unless final; None: no record."""
        reply = scripts.run(self.client, "record_watch",
                            [keys.record_key(self.prefix, task_id)], [])
        return _fields(dict(zip(reply[::2], reply[1::2], strict=True)))

    def wait_done(self, task_id: str, timeout_s: float) -> bool:
        """Block up to `timeout_s` on the done list (BLMOVE onto itself, so every waiter
        sees the element); True when it holds one (the record went final)."""
        key = keys.record_done_key(self.prefix, task_id)
        return self.client.blmove(key, key, timeout_s, "RIGHT", "LEFT") is not None

    def cancel(self, task_id: str, now_ms: int, ttl_s: int,
               terminate: bool = False) -> CancelReply:
        """`record_cancel.lua`: flag the record cancelled unless it is finished (with
        `terminate`, a running one flagged already is answered "ok" again)."""
        reply = [text(part) for part in scripts.run(
            self.client, "record_cancel",
            [keys.record_key(self.prefix, task_id), keys.record_done_key(self.prefix, task_id)],
            [str(now_ms), str(ttl_s), "1" if terminate else "0"])]
        if reply[0] != "ok":
            return CancelReply(reply[0], reply[1] if len(reply) > 1 else "")
        return CancelReply("ok", reply[1], reply[2], reply[3], reply[4], reply[5] == "1",
                           reply[6] if len(reply) > 6 else "")

    def cancel_entry(
        self, group: str, shard: str, stream_id: str, holder: str, running: bool,
        releases: Sequence[tuple[str, str]], notice: str, ttl_s: int,
    ) -> EntryCancel:
        """`cancel_entry.lua` in the shard's slot: delete a message not delivered yet and
        free its keys (`releases`: (key, '0' | 'follow'), as `release_lock.lua`), or mark
        it cancelled for the consumer that holds it; PUBLISH `notice` on the cancels
        channel, after the holding consumer's name. One round trip."""
        reply = [text(part) for part in scripts.run(
            self.client, "cancel_entry",
            [keys.stream_key(self.prefix, shard), keys.cancelled_key(self.prefix, shard),
             *(key for key, _action in releases)],
            [group, stream_id, holder, str(ttl_s), "0" if running else "1",
             keys.cancel_channel(self.prefix), notice,
             *(action for _key, action in releases)])]
        if reply[0] == "held":
            return EntryCancel("held", consumer=reply[1], idle_ms=int(reply[2]))
        return EntryCancel(reply[0], freed=reply[0] == "removed" or reply[1:2] == ["1"])

    def answer_cancel(self, reply_key: str, answer: str) -> None:
        """A worker's answer to one `cancel()` call (LPUSH, kept 10 s for a late reader)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.lpush(reply_key, answer)
        pipe.expire(reply_key, 10)
        pipe.execute()

    def wait_answer(self, reply_key: str, timeout_s: float) -> str | None:
        """BLPOP the holding worker's answer to a `cancel()`; None after `timeout_s`."""
        reply = self.client.blpop([reply_key], timeout_s)
        return None if reply is None else text(reply[1])

    def subscription(self) -> WakeSubscription:
        """A pub/sub connection of its own, subscribed to nothing yet (the workers'
        listener of `keys.cancel_channel`)."""
        return WakeSubscription(self.client.pubsub())

    def cancelled_members(self, shard: str) -> set[str]:
        """SMEMBERS of a shard's cancelled set (a reclaim reads it before it runs)."""
        return {text(member) for member in
                self.client.smembers(keys.cancelled_key(self.prefix, shard))}


def holder_of(task_id: str, token: str) -> str:
    """A message's holder value from its id and dispatch token ("": none), as
    core/unique.py's `holder_value` gives it."""
    return f"{task_id}#{token}" if token else task_id


# The record writes' one argument: compact JSON, any text kept as it is.
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _flat(fields: Sequence[tuple[str, str]]) -> list[str]:
    return [part for pair in fields for part in pair]


def _fields(raw: dict[Any, Any]) -> dict[str, str] | None:
    if not raw:
        return None
    return {text(name): text(value, errors="replace") for name, value in raw.items()}


@dataclass(frozen=True)
class FinishedLimits:
    """What the finished index keeps: `keep` ids per queue (`FINISHED_LIST_SIZE`, 0: no
    index), for at least `result_ttl_s` seconds (`RESULT_TTL`). The store is handed these
    (it reads no settings); the defaults are the settings' defaults."""

    keep: int = 10_000
    result_ttl_s: int = 86_400


class FinishedIndex:
    """The finished indexes under one client and key prefix."""

    def __init__(self, client: Any, prefix: str, limits: FinishedLimits | None = None) -> None:
        self.client = client
        self.prefix = prefix
        self.limits = limits or FinishedLimits()

    def page(self, queue: str, cursor: str, count: int, statuses: frozenset[str],
             scan: int) -> FinishedPage:
        """Up to `count` finished tasks of `queue`, newest first, from `cursor` ("": the
        newest; else a `FinishedPage.next_cursor`), whose status is in `statuses`: the
        index read a batch at a time (ZREVRANGEBYSCORE from the cursor's score, past the
        ids of that score already shown), then their records (HMGET, one pipeline per
        batch), at most `scan` ids per page. Ids whose record expired are skipped and
        removed from the index."""
        index = keys.finished_key(self.prefix, queue)
        at = _FinishedCursor.parse(cursor)
        rows: list[FinishedRow] = []
        scanned = 0
        while len(rows) < count and scanned < scan:
            want = min(max(count - len(rows), 50), scan - scanned)
            batch = self.client.zrevrangebyscore(
                index, "+inf" if at.top is None else at.top, "-inf", start=at.skip, num=want,
                withscores=True)
            at, read = self._filter_batch(index, at, batch, statuses, count - len(rows), rows)
            scanned += read
            if len(batch) < want and read == len(batch):
                return FinishedPage(rows, "", scanned)  # the index's end
        return FinishedPage(rows, at.text(), scanned)

    def count(self, queue: str) -> int:
        """ZCARD of `queue`'s finished index."""
        return int(self.client.zcard(keys.finished_key(self.prefix, queue)))

    def _filter_batch(self, index: str, at: _FinishedCursor, batch: list[Any],
                      statuses: frozenset[str], room: int,
                      rows: list[FinishedRow]) -> tuple[_FinishedCursor, int]:
        """Append to `rows` (at most `room`) the ids of `batch` whose record holds one of
        `statuses`; the cursor past the last id looked at, and how many were."""
        pipe = self.client.pipeline(transaction=False)
        for member, _ in batch:
            pipe.hmget(keys.record_key(self.prefix, text(member)), FINISHED_FIELDS)
        gone: list[tuple[Any, int]] = []
        read = 0
        for (member, score), values in zip(batch, pipe.execute() if batch else [],
                                           strict=True):
            read += 1
            at = at.past(int(score))
            fields = {name: text(value, errors="replace")
                      for name, value in zip(FINISHED_FIELDS, values, strict=True)
                      if value is not None}
            if "s" not in fields:
                gone.append((member, int(score)))
            elif fields["s"] in statuses:
                rows.append(FinishedRow(text(member), int(score), fields))
                room -= 1
                if room == 0:
                    break
        if gone:  # expired records: out of the index (and out of the cursor's offset)
            self.client.zrem(index, *(member for member, _ in gone))
            at = _FinishedCursor(at.top, at.skip - sum(1 for _, sc in gone if sc == at.top))
        return at, read

    def list_task(self, queue: str, task_id: str, finished_ms: int, ttl_s: int) -> None:
        """`record_index.lua`: list a task no worker will write the final record of (a
        queued message a cancel deleted) in its queue's finished index, as a final write
        does (nothing with the index off)."""
        keep, result_ttl_s = self.limits.keep, self.limits.result_ttl_s
        if keep > 0:
            kept_s = max(ttl_s, result_ttl_s)
            scripts.run(self.client, "record_index", [keys.finished_key(self.prefix, queue)],
                        [task_id, str(finished_ms), str(keep),
                         str(finished_ms - kept_s * 1000), str(ttl_s)])


FINISHED_FIELDS = ("s", "t", "q", "a", "w", "d", "st", "f", "e")


@dataclass(frozen=True)
class FinishedRow:
    """One finished task of the index: its id, finish time and record fields (of
    `FINISHED_FIELDS`, those it holds)."""

    task_id: str
    finished_ms: int
    fields: dict[str, str]


@dataclass(frozen=True)
class FinishedPage:
    """A page of finished tasks; `next_cursor` "" when the index has no more;
    `scanned`: the ids read for it (at most the page's `scan`)."""

    rows: list[FinishedRow]
    next_cursor: str
    scanned: int


@dataclass(frozen=True)
class _FinishedCursor:
    """Where a page of the finished index starts: at score `top` (None: the newest),
    past the first `skip` ids of that score (ids finished in one millisecond)."""

    top: int | None = None
    skip: int = 0

    @classmethod
    def parse(cls, cursor: str) -> _FinishedCursor:
        top, _, skip = cursor.partition(":")
        if not (top.isdigit() and skip.isdigit()) or len(cursor) > 40:
            return cls()
        return cls(int(top), int(skip))

    def past(self, score: int) -> _FinishedCursor:
        """The cursor after an id of `score` (the ids come newest first)."""
        return _FinishedCursor(score, self.skip + 1 if score == self.top else 1)

    def text(self) -> str:
        return f"{self.top}:{self.skip}" if self.top is not None else ""


class _Index(NamedTuple):
    """Where and when a final write lists its task: its queue, finish time, and the
    oldest finish time its index keeps (a tuple: one is built per finished task)."""

    queue: str
    finished_ms: int
    cutoff_ms: int


def index_of(write: RecordWrite, keep: int, result_ttl_s: int) -> _Index | None:
    """The index entry of a final write naming its queue ('q') and finish time ('f'),
    kept as long as the longer of its record's TTL and `result_ttl_s` (`RESULT_TTL`);
    None for any other write, or with the index off."""
    if not write.final or keep <= 0:
        return None
    queue = finished = None
    for name, value in write.fields:
        if name == "q":
            queue = value
        elif name == "f":
            finished = value
    if not queue or finished is None or not finished.isdigit():
        return None
    finished_ms = int(finished)
    kept_s = max(write.ttl_s, result_ttl_s)
    return _Index(queue, finished_ms, finished_ms - kept_s * 1000)


# Django Tasks framework results: one JSON record per result id, with a TTL.
#
# The record is opaque text here (`backends.py` builds and reads it). Keys come from
# `keys.result_key` (not queue-tagged: a result is found by its id alone). Redis outage
# errors (`errors.REDIS_DOWN`) pass through unchanged.

class Results:
    """The result records under one client and key prefix."""

    def __init__(self, client: Any, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    def load(self, result_id: str) -> str | None:
        """GET the record of `result_id`; None when there is none (or it expired)."""
        raw = self.client.get(keys.result_key(self.prefix, result_id))
        return None if raw is None else text(raw)

    def save(self, result_id: str, record: str, ttl_seconds: int) -> None:
        """SET the record of `result_id` with EX `ttl_seconds`."""
        self.client.set(keys.result_key(self.prefix, result_id), record, ex=ttl_seconds)

    def save_and_add(self, result_id: str, record: str, ttl_seconds: int, queue: str,
                     body: str) -> None:
        """SET the record, then XADD `body` to the stream of `queue` (or shard), in one
        pipelined round trip: a worker reading the message always finds its record."""
        pipe = self.client.pipeline(transaction=False)
        pipe.set(keys.result_key(self.prefix, result_id), record, ex=ttl_seconds)
        pipe.xadd(keys.stream_key(self.prefix, queue), {keys.ENTRY_FIELD: body})
        pipe.execute()


# The kept results of a task's durable steps (`ctx.step`, core/context.py).
#
# One hash per task id, in its record's slot: step name -> the JSON text core/context.py
# built. Read once per
# attempt (HGETALL), written with one pipelined round trip per step (HSET + EXPIRE).

class StepsStore:
    """The steps hashes under one client and key prefix."""

    def __init__(self, client: Any, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    def load(self, task_id: str) -> dict[str, str]:
        """Every kept step of `task_id`: name -> JSON text (empty when none or expired)."""
        raw = self.client.hgetall(keys.steps_key(self.prefix, task_id))
        return {text(name): text(value) for name, value in raw.items()}

    def keep(self, task_id: str, name: str, value: str, ttl_seconds: int) -> None:
        """HSET one step and (re)set the hash's TTL, in one round trip."""
        key = keys.steps_key(self.prefix, task_id)
        pipe = self.client.pipeline(transaction=False)
        pipe.hset(key, name, value)
        pipe.expire(key, ttl_seconds)
        pipe.execute()

    def holders(self, task_ids: list[str], ttl_seconds: int) -> set[str]:
        """The ids among `task_ids` that have kept steps, whose TTL is set to
        `ttl_seconds` now (one round trip: EXPIRE answers 0 for a key that is gone)."""
        pipe = self.client.pipeline(transaction=False)
        for task_id in task_ids:
            pipe.expire(keys.steps_key(self.prefix, task_id), ttl_seconds)
        return {task_id for task_id, n in zip(task_ids, pipe.execute(), strict=True) if n}
