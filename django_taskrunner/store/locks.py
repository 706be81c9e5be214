"""Unique locks and task-id reservations: the Redis side of `core/unique.py`.

Which key a dispatch locks, for how long and in which mode is decided in `core/`; this
module only runs the commands, on plain values: key names (from `keys.py`), the holder
value (a str), TTLs in ms, message bodies (opaque str). Writes go through two scripts,
`lua/enqueue.lua` (take the lock / reservation and add the message, all or nothing) and
`lua/release_lock.lua` (compare-and-delete / compare-and-expire by holder).

Redis outage errors (`errors.REDIS_DOWN`) pass through every method unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django_taskrunner.store import keys, scripts
from django_taskrunner.store.connection import text
from django_taskrunner.store.records import Records, RecordWrite


@dataclass(frozen=True)
class Reservation:
    """One message to add with what it reserves (the arguments of `enqueue.lua`).

    `destination` is a stream key (XADD now, `due_ms` None) or a delayed-set key (ZADD
    at `due_ms`, PUBLISH `due_ms` on `wake_channel` when it is due before every other).
    A `lock_key` is set to `holder` for `lock_ttl_ms`, its `mode_key` (if any) to `mode`
    with the same TTL; an `id_key` is set to `holder` for `id_ttl_ms`.
    """

    destination: str
    body: str
    holder: str
    due_ms: int | None = None
    wake_channel: str = ""
    lock_key: str | None = None
    lock_ttl_ms: int = 0
    mode_key: str | None = None
    mode: str = ""
    id_key: str | None = None
    id_ttl_ms: int = 0
    # What a held lock means (enqueue.lua's ARGV[10]): "" / "raise", "return", "replace",
    # "debounce"; for the last three `other` is the queue's other structure (the delayed
    # set of a stream destination, or the stream), `group` the consumer group, and
    # `head` + `rest` the body split around its id and token (`message.holder_parts`).
    policy: str = ""
    other: str | None = None
    group: str = ""
    head: str = ""
    rest: str = ""

    def script_call(self) -> tuple[list[str], list[str]]:
        """KEYS and ARGV of enqueue.lua (see the script's header)."""
        call_keys = [self.destination]
        lock_value = lock_ttl = id_value = id_ttl = ""
        if self.lock_key is not None:
            call_keys.append(self.lock_key)
            lock_value, lock_ttl = self.holder, str(self.lock_ttl_ms)
            if self.mode_key is not None:
                call_keys.append(self.mode_key)
        if self.id_key is not None:
            call_keys.append(self.id_key)
            id_value, id_ttl = self.holder, str(self.id_ttl_ms)
        where = "stream" if self.due_ms is None else "delayed"
        score = "0" if self.due_ms is None else str(self.due_ms)
        args = [where, self.body, score, lock_value, lock_ttl, id_value, id_ttl,
                self.wake_channel]
        if self.lock_key is not None and self.mode_key is not None:
            args.append(self.mode)
        if self.policy:
            args += [""] * (9 - len(args))
            args += [self.policy, self.group, self.head, self.rest]
            if self.other is not None:
                call_keys.append(self.other)
        return call_keys, args


# What `add_reserved` returns: ("ok", stream id | "delayed"), ("lock", holder found) or
# ("id", holder found), ("replaced", holder, stream id | "delayed") when the holder took
# the payload; with policy "return", ("lock", holder, the holder's body or "").
AddReply = tuple[str, ...]


@dataclass(frozen=True)
class LockState:
    """A held lock as read: its holder value, TTL (None: no TTL) and recorded mode."""

    holder: str
    ttl_ms: int | None
    mode: str | None  # None: no mode record (a lock older than mode records)
    policy: str | None = None  # the holder's on_conflict; None: not recorded


def read_mode_record(value: str) -> tuple[str, str | None]:
    """(mode, policy) of a mode record: `<mode>` alone (older), or
    `<mode>\\n<policy>\\n<where>\\n<ref>` (see enqueue.lua)."""
    parts = value.split("\n", 2)
    return parts[0], parts[1] if len(parts) > 1 else None


class UniqueLocks:
    """The unique locks and task-id reservations under one client and key prefix."""

    def __init__(self, client: Any, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    # -- taking (dispatch) ---------------------------------------------------------------

    def add_reserved(
        self, reservation: Reservation, record: RecordWrite | None = None,
    ) -> AddReply:
        """Take the reservation and add its message in one EVALSHA of enqueue.lua.

        Returns ("ok", stream id or "delayed"), or on contention ("lock" | "id", the
        holder value found) and nothing at all is written. A task `record` is written
        by the same script on one server; on a cluster (another slot) by a second round
        trip once the message was added, with its stream id (`Records.save_new`).
        """
        store = Records(self.client, self.prefix)
        reply = _add_reply(scripts.run(self.client, "enqueue",
                                       *_script_call(reservation, record, store)))
        if record is not None and store.clustered and reply[0] == "ok":
            store.save_new([(record, reply[1])])
        return reply

    def add_reserved_many(
        self, reservations: Sequence[Reservation],
        records: Sequence[RecordWrite | None] = (), delete: Sequence[str] = (),
    ) -> list[AddReply]:
        """`add_reserved` for each, pipelined in one round trip; replies in order. With
        `records` (one per reservation, None for none), as `add_reserved`. The keys of
        `delete` are DELeted in the same round trip, first (the outbox's spent marks)."""
        store = Records(self.client, self.prefix)
        calls = [_script_call(reservation, records[index] if index < len(records) else None,
                              store) for index, reservation in enumerate(reservations)]

        def build(pipe: Any) -> None:
            for key in delete:
                pipe.execute_command("DEL", key)
            for call in calls:
                scripts.queue(pipe, "enqueue", *call)

        # Bare EVALSHAs: `scripts.run` on a pipeline would ask SCRIPT EXISTS first, one more
        # round trip. On NOSCRIPT no enqueue ran, so the batch is sent again whole.
        sent = scripts.execute_loading(self.client, build, ["enqueue"])
        replies = [_add_reply(reply) for reply in sent[len(delete):]]
        if store.clustered:
            store.save_new([(record, reply[1])
                            for record, reply in zip(records, replies, strict=False)
                            if record is not None and reply[0] == "ok"])
        return replies

    # -- freeing (worker, admin) ---------------------------------------------------------

    def release(self, holder: str, actions: Sequence[tuple[str, str]]) -> list[int | str]:
        """Run release_lock.lua: per (key, action), only while `key` holds `holder`.

        An action is "0" (delete), "follow" (delete if the key before was just deleted:
        a lock's mode record) or a TTL in ms (renew). Returns per key: 1 done, 0 gone (or
        a "follow" left alone), else the value it holds now (another holder).
        """
        call_keys = [key for key, _ in actions]
        replies = scripts.run(self.client, "release_lock", call_keys,
                              [holder, *(action for _, action in actions)])
        return [reply if isinstance(reply, int) else text(reply) for reply in replies]

    def release_lock(self, queue: str, lock_key: str, holder: str) -> int | str:
        """Free `lock_key` of `queue` (or shard) and its mode record while it holds
        `holder`: 1 freed, 0 already gone, else the value it holds now."""
        mode_key = keys.unique_mode_key(self.prefix, queue, lock_key)
        return self.release(holder, [(lock_key, "0"), (mode_key, "follow")])[0]

    # -- inspecting (admin) --------------------------------------------------------------

    def inspect_many(self, locks: Sequence[tuple[str, str]]) -> list[LockState | None]:
        """GET, PTTL and the mode record's GET of each (queue, lock key), pipelined in one
        round trip (none for no keys); None for a lock not held."""
        if not locks:
            return []
        pipe = self.client.pipeline(transaction=False)
        for queue, key in locks:
            pipe.get(key)
            pipe.pttl(key)
            pipe.get(keys.unique_mode_key(self.prefix, queue, key))
        replies = pipe.execute()
        states: list[LockState | None] = []
        for index in range(len(locks)):
            holder, ttl_ms, mode = replies[3 * index:3 * index + 3]
            recorded = (None, None) if mode is None else read_mode_record(
                text(mode, errors="replace"))
            states.append(None if holder is None else LockState(
                text(holder, errors="replace"), int(ttl_ms) if int(ttl_ms) >= 0 else None,
                recorded[0], recorded[1]))
        return states

    def scan_nodes(self) -> int:
        """How many servers a key scan walks: 1, or the primaries of a Redis Cluster."""
        return len(self._nodes())

    def scan_keys(self, node: int, cursor: int, match: str, count: int) -> tuple[int, list[str]]:
        """One SCAN MATCH `match` COUNT `count` on server `node` (see `scan_nodes`), from
        `cursor`: the next cursor (0 when done) and the key names found."""
        target = self._nodes()[node]
        if target is None:
            next_cursor, batch = self.client.scan(cursor=cursor, match=match, count=count)
        else:
            cursors, batch = self.client.scan(cursor=cursor, match=match, count=count,
                                              target_nodes=target)
            next_cursor = cursors[target.name]
        return int(next_cursor), [text(key, errors="replace") for key in batch]

    def _nodes(self) -> list[Any]:
        """[None] for one server; the primaries, in a stable order, on Redis Cluster."""
        if hasattr(self.client, "get_primaries"):
            return sorted(self.client.get_primaries(), key=lambda node: node.name)
        return [None]


def _script_call(
    reservation: Reservation, record: RecordWrite | None, store: Records,
) -> tuple[list[str], list[str]]:
    """enqueue.lua's KEYS and ARGV, with the record's on one server (see the script)."""
    call_keys, args = reservation.script_call()
    if record is None or store.clustered:
        return call_keys, args
    record_keys, record_args = store.enqueue_args(record)
    args = args + [""] * (13 - len(args))  # ARGV[9..13], mode and policy: "" when none
    return call_keys + record_keys, args + record_args


def _add_reply(reply: Any) -> AddReply:
    return tuple("" if part is None or part is False else text(part) for part in reply)
