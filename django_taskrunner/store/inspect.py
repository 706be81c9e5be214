"""Reading the queues' state for the figures, the dashboard and the metrics (read-only);
and for the admin, a queue's stream a page at a time, with its purge (below).

A class of its own rather than more `Broker` methods: each read batches stream
inspection (XINFO GROUPS / CONSUMERS, XLEN, XRANGE) with the statistics keys written by
`store/stats.py` (stats hash, windows, minute hashes, worker heartbeats) in one
pipelined round trip, so it belongs to neither alone; and the broker stays the worker's
hot path. Every method returns plain values (text, ints, small frozen dataclasses).
Redis outage errors (`store.errors.REDIS_DOWN`) pass through unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ResponseError

from django_taskrunner.store import keys, scripts
from django_taskrunner.store.connection import text
from django_taskrunner.store.entries import entry_body
from django_taskrunner.store.streams import levels_in_use


@dataclass(frozen=True)
class GroupInfo:
    """The consumer group on one stream (XINFO GROUPS) and the stream's length (XLEN)."""

    stream: str  # the queue, or one shard of it
    length: int
    found: bool  # the group exists (False: no stream yet, or no worker created the group)
    pending: int
    lag: int | None  # None: Redis < 7, or a lag Redis cannot compute
    last_delivered: str


@dataclass(frozen=True)
class QueueSnapshot:
    """The first read of a queue's figures (`Inspector.read_queue`)."""

    groups: tuple[GroupInfo, ...]
    stats: dict[str, str]  # the stats hash
    window: list[int]  # the queue's recent run times, microseconds, newest first
    minutes: tuple[dict[str, str], dict[str, str]]  # this minute's hash, the previous one's
    live_workers: list[str]  # consumers whose heartbeat has not expired
    # Priority levels in use of the shards read, not among `streams` (docs/priorities.md).
    levels: tuple[str, ...] = ()


@dataclass(frozen=True)
class QueueDetails:
    """The second read of a queue's figures (`Inspector.read_details`)."""

    first_waiting: list[str | None]  # per stream: id of its first undelivered entry
    loads: list[tuple[int | None, int | None]]  # per worker: (threads, busy) of its heartbeat
    windows: list[list[int]]  # per task: recent run times, microseconds, newest first


@dataclass(frozen=True)
class ConsumerRow:
    """One consumer of a group, as XINFO CONSUMERS tells."""

    name: str
    pending: int
    idle_ms: int
    inactive_ms: int | None  # None before Redis 7.2 (or never read)


class Inspector:
    """Read-only queries over one client, key prefix and consumer group."""

    def __init__(self, client: Any, prefix: str, group: str) -> None:
        self.client = client
        self.prefix = prefix
        self.group = group

    def read_queue(self, queue: str, streams: Sequence[str], now_ms: int) -> QueueSnapshot:
        """One pipelined round trip (any slots): XINFO GROUPS + XLEN of each of `streams`
        (the queue's own, or its shards'), HGETALL `keys.stats_key`, LRANGE
        `keys.window_key`, HGETALL this and the previous minute's `keys.minute_key`,
        ZRANGEBYSCORE `keys.queue_workers_key` from `now_ms`. A missing stream reads as
        a group not found; any other error is raised."""
        minute = now_ms // 60_000
        pipe = self.client.pipeline(transaction=False)
        for stream in streams:
            pipe.xinfo_groups(keys.stream_key(self.prefix, stream))
            pipe.xlen(keys.stream_key(self.prefix, stream))
        pipe.hgetall(keys.stats_key(self.prefix, queue))
        pipe.lrange(keys.window_key(self.prefix, queue), 0, -1)
        pipe.hgetall(keys.minute_key(self.prefix, queue, minute))
        pipe.hgetall(keys.minute_key(self.prefix, queue, minute - 1))
        pipe.zrangebyscore(keys.queue_workers_key(self.prefix, queue), now_ms, "+inf")
        probes = [name for stream in streams if keys.LEVEL_MARK not in stream
                  for name in keys.level_names(stream) if name not in streams]
        for name in probes:  # the levels in use, in the same round trip
            pipe.exists(keys.stream_key(self.prefix, name), keys.delayed_key(self.prefix, name))
        replies = pipe.execute(raise_on_error=False)
        replies, found = replies[:len(replies) - len(probes)], replies[len(replies) - len(probes):]
        per_stream, rest = replies[:2 * len(streams)], replies[2 * len(streams):]
        for reply in [*per_stream[1::2], *rest]:
            if isinstance(reply, Exception):
                raise reply
        stats, window, current, previous, workers = rest
        return QueueSnapshot(
            groups=tuple(self._group(stream, groups, length) for stream, groups, length
                         in zip(streams, per_stream[0::2], per_stream[1::2], strict=True)),
            stats=_hash(stats), window=[int(value) for value in window if value.isdigit()],
            minutes=(_hash(current), _hash(previous)),
            live_workers=[text(name) for name in workers],
            levels=tuple(name for name, hits in zip(probes, found, strict=True)
                         if hits and not isinstance(hits, Exception)))

    def _group(self, stream: str, groups: Any, length: Any) -> GroupInfo:
        if isinstance(groups, Exception):  # no stream yet: nothing dispatched, no worker
            groups = []
        group = next((g for g in groups if text(g.get("name", b"")) == self.group), {})
        lag = group.get("lag")
        return GroupInfo(stream=stream, length=int(length), found=bool(group),
                         pending=int(group.get("pending") or 0),
                         lag=None if lag is None else int(lag),
                         last_delivered=text(group.get("last-delivered-id") or b"0-0"))

    def read_details(self, queue: str, after: Sequence[tuple[str, str]],
                     workers: Sequence[str], task_names: Sequence[str]) -> QueueDetails:
        """One pipelined round trip (none when all three are empty): XRANGE of the first
        entry after each (stream, last delivered id) of `after`, HMGET threads/busy of
        each of `workers`' `keys.worker_key`, LRANGE each task's `keys.window_key`."""
        pipe = self.client.pipeline(transaction=False)
        for stream, last_delivered in after:
            pipe.xrange(keys.stream_key(self.prefix, stream), f"({last_delivered}", "+",
                        count=1)
        self._queue_loads(pipe, workers)
        for name in task_names:
            pipe.lrange(keys.window_key(self.prefix, queue, name), 0, -1)
        replies = pipe.execute()
        firsts, rest = replies[:len(after)], replies[len(after):]
        beats, windows = rest[:len(workers)], rest[len(workers):]
        return QueueDetails(
            first_waiting=[text(entries[0][0]) if entries else None for entries in firsts],
            loads=[_load(beat) for beat in beats],
            windows=[[int(value) for value in values] for values in windows])

    def worker_loads(self, workers: Sequence[str]) -> list[tuple[int | None, int | None]]:
        """(threads, busy) of each worker's heartbeat hash (`keys.worker_key`, HMGET), None
        where absent; one pipelined round trip, none for no worker."""
        if not workers:
            return []
        pipe = self.client.pipeline(transaction=False)
        self._queue_loads(pipe, workers)
        return [_load(beat) for beat in pipe.execute()]

    def _queue_loads(self, pipe: Any, workers: Sequence[str]) -> None:
        for consumer in workers:
            pipe.hmget(keys.worker_key(self.prefix, consumer), "threads", "busy")

    def consumers(self, stream: str, now_ms: int) -> tuple[list[ConsumerRow], list[str]]:
        """The group's consumers on `stream` (XINFO CONSUMERS; [] when the stream or the
        group is missing) and the live workers of `keys.queue_workers_key` (ZRANGEBYSCORE
        from `now_ms`), in one pipelined round trip."""
        pipe = self.client.pipeline(transaction=False)
        pipe.xinfo_consumers(keys.stream_key(self.prefix, stream), self.group)
        pipe.zrangebyscore(keys.queue_workers_key(self.prefix, stream), now_ms, "+inf")
        listed, live = pipe.execute(raise_on_error=False)
        if isinstance(listed, Exception):  # no stream or no group yet
            listed = []
        if isinstance(live, Exception):
            raise live
        rows = [ConsumerRow(name=text(row["name"]), pending=int(row["pending"]),
                            idle_ms=int(row["idle"]),
                            inactive_ms=None if row.get("inactive") in (None, -1)
                            else int(row["inactive"])) for row in listed]
        return rows, [text(name) for name in live]

    def minute_hashes(self, queue: str, minutes: Sequence[int]) -> list[dict[str, str]]:
        """HGETALL of each epoch minute's `keys.minute_key`, in one pipelined round trip."""
        pipe = self.client.pipeline(transaction=False)
        for minute in minutes:
            pipe.hgetall(keys.minute_key(self.prefix, queue, minute))
        return [_hash(counts) for counts in pipe.execute()]

    def leader(self) -> tuple[str | None, int]:
        """GET and PTTL of the group's `keys.leader_key` in one pipelined round trip:
        (holder or None, milliseconds left; negative when it has no TTL or is gone)."""
        pipe = self.client.pipeline(transaction=False)
        key = keys.leader_key(self.prefix, self.group)
        pipe.get(key)
        pipe.pttl(key)
        holder, ttl_ms = pipe.execute()
        return None if holder is None else text(holder), int(ttl_ms)

    def leader_holder(self) -> str | None:
        """GET the group's `keys.leader_key`: who holds the lease, None if nobody."""
        holder = self.client.get(keys.leader_key(self.prefix, self.group))
        return None if holder is None else text(holder)

    def recorded_queues(self) -> set[str]:
        """The known queues: ZRANGE of `keys.queues_seen_key` and SMEMBERS of the older
        `keys.known_queues_key` (one round trip): those workers consumed or dispatches
        used, until the leader forgets them."""
        pipe = self.client.pipeline(transaction=False)
        pipe.zrange(keys.queues_seen_key(self.prefix), 0, -1)
        pipe.smembers(keys.known_queues_key(self.prefix))
        seen, legacy = pipe.execute()
        return {text(name) for name in (*seen, *legacy)}


def _hash(raw: dict[Any, Any]) -> dict[str, str]:
    return {text(name): text(value) for name, value in raw.items()}


def _load(beat: Sequence[Any]) -> tuple[int | None, int | None]:
    threads, busy = beat
    return (None if threads is None else int(threads), None if busy is None else int(busy))


# Reading a queue's stream a page at a time, and purging what waits in it, for the admin.
#
# `StreamBrowser` never reads a whole stream: a page of waiting messages is one XRANGE (or
# XREVRANGE) from a cursor (a stream id), a page of running ones one XPENDING from a
# cursor plus one pipelined XRANGE per id for their bodies. "Waiting" means queued and not
# yet delivered to any worker: after the consumer group's last-delivered id. Entries up to
# that id are pending (a worker holds them) or, with DELETE_ON_ACK off, done.
#
# Purging goes in batches: Python reads a batch and works out which lock and task-id keys
# each body holds (the caller decodes, the store knows no message format), then one script
# per batch (`lua/purge_stream.lua`, `lua/purge_delayed.lua`) removes those of the batch
# that still wait and frees their keys where they still hold them, atomically.
#
# A `queue` argument is one stream: a queue, or one shard of a split queue.

STREAM_ID = re.compile(r"^\d{1,20}-\d{1,20}$")


@dataclass(frozen=True)
class StreamEntry:
    """One entry of a stream: its id and body (None when it holds no message field)."""

    stream_id: str
    body: bytes | None


@dataclass(frozen=True)
class Held:
    """One pending entry: who holds it, since when (idle), delivered how often, its body."""

    stream_id: str
    consumer: str
    idle_ms: int
    deliveries: int
    body: bytes | None  # None: deleted from the stream while pending


@dataclass(frozen=True)
class GroupState:
    """What the consumer group says of one stream (zeros when it has no group yet)."""

    length: int  # XLEN: waiting + pending (+ done, with DELETE_ON_ACK off)
    pending: int
    last_delivered: str  # "0-0" before any delivery
    waiting: int  # not yet delivered to any worker


@dataclass(frozen=True)
class Release:
    """A key a purged message holds, and the value it must still hold to be freed.

    `holder` "" means: free it only if the key before it was just freed (a lock's mode
    record goes with its lock)."""

    key: str
    holder: str


@dataclass(frozen=True)
class PurgeItem:
    """One message to purge: where it is (stream id, or delayed-set member) and what it frees."""

    ref: str | bytes
    releases: tuple[Release, ...] = ()


def stream_id_key(stream_id: str) -> tuple[int, int]:
    """A stream id as a number pair, for ordering ("10-2" < "9-5" as text)."""
    ms, _sep, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


class StreamBrowser:
    """Paged reads of streams and pending entries, and the purge, for one client/prefix/group."""

    def __init__(self, client: Any, prefix: str, group: str) -> None:
        self.client = client
        self.prefix = prefix
        self.group = group

    def streams(self, shards: Sequence[str]) -> list[str]:
        """The streams of `shards`: each shard's own and its priority levels in use,
        highest first (one pipelined round trip of EXISTS)."""
        found = levels_in_use(self.client, self.prefix, shards)
        return [stream for shard in shards for stream in found[shard]]

    def stream(self, queue: str) -> str:
        """The stream key of a queue, shard or priority level."""
        return keys.stream_key(self.prefix, queue)

    def group_state(self, queue: str) -> GroupState:
        """XLEN, XPENDING (summary) and XINFO GROUPS of one stream, in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        pipe.xlen(self.stream(queue))
        pipe.xinfo_groups(self.stream(queue))
        length, groups = pipe.execute(raise_on_error=False)
        if isinstance(length, Exception):
            raise length
        ours = [] if isinstance(groups, Exception) else [
            g for g in groups if text(g["name"]) == self.group]
        if not ours:
            return GroupState(int(length), 0, "0-0", int(length))
        group = ours[0]
        pending = int(group["pending"])
        last = text(group["last-delivered-id"])
        lag = group.get("lag")
        waiting = int(lag) if lag is not None else max(0, int(length) - pending)
        return GroupState(int(length), pending, last, waiting)

    def waiting_after(self, queue: str, after: str, count: int) -> list[StreamEntry]:
        """Up to `count` entries after stream id `after` (exclusive), oldest first (XRANGE)."""
        rows = self.client.xrange(self.stream(queue), f"({after}", "+", count=count)
        return [_entry(queue, row) for row in rows]

    def waiting_before(self, queue: str, before: str, floor: str, count: int
                       ) -> list[StreamEntry]:
        """Up to `count` entries before `before` and after `floor` (both exclusive), oldest
        first: the previous page (XREVRANGE, reversed)."""
        end = "+" if before == "+" else f"({before}"
        rows = self.client.xrevrange(self.stream(queue), end, f"({floor}", count=count)
        return [_entry(queue, row) for row in reversed(rows)]

    def entry(self, queue: str, stream_id: str) -> StreamEntry | None:
        """The entry with this id (XRANGE id id), None when there is none."""
        rows = self.client.xrange(self.stream(queue), stream_id, stream_id)
        return _entry(queue, rows[0]) if rows else None

    def held(self, queue: str, after: str, count: int, consumer: str | None = None
             ) -> list[Held]:
        """Up to `count` pending entries after `after` (exclusive; "-" from the start), of
        one consumer or all (extended XPENDING), with their bodies (one pipelined XRANGE
        per id). [] when the stream or group does not exist."""
        start = "-" if after == "-" else f"({after}"
        try:
            rows = self.client.xpending_range(self.stream(queue), self.group, start, "+",
                                              count, consumername=consumer)
        except ResponseError as exc:
            if "NOGROUP" in str(exc) or "no such key" in str(exc):
                return []
            raise
        ids = [text(row["message_id"]) for row in rows]
        bodies = self._bodies(queue, ids)
        return [Held(stream_id, text(row["consumer"]), int(row["time_since_delivered"]),
                     int(row["times_delivered"]), bodies[stream_id])
                for stream_id, row in zip(ids, rows, strict=True)]

    def holder_of(self, queue: str, stream_id: str) -> Held | None:
        """The pending entry `stream_id`, if a worker holds it (XPENDING id id 1)."""
        try:
            rows = self.client.xpending_range(self.stream(queue), self.group, stream_id,
                                              stream_id, 1)
        except ResponseError as exc:
            if "NOGROUP" in str(exc) or "no such key" in str(exc):
                return None
            raise
        if not rows:
            return None
        row = rows[0]
        return Held(stream_id, text(row["consumer"]), int(row["time_since_delivered"]),
                    int(row["times_delivered"]), self._bodies(queue, [stream_id])[stream_id])

    def _bodies(self, queue: str, stream_ids: Sequence[str]) -> dict[str, bytes | None]:
        if not stream_ids:
            return {}
        pipe = self.client.pipeline(transaction=False)
        for stream_id in stream_ids:
            pipe.xrange(self.stream(queue), stream_id, stream_id)
        return {stream_id: (_entry(queue, rows[0]).body if rows else None)
                for stream_id, rows in zip(stream_ids, pipe.execute(), strict=True)}

    def find_in_stream(self, queue: str, after: str, count: int, needle: bytes
                       ) -> tuple[list[str], str]:
        """The ids of the `count` entries after `after` whose body holds `needle`, found
        on the server (`lua/find_in_stream.lua`, one bounded XRANGE); and the cursor to
        go on from ("" when the stream ends)."""
        found, last = scripts.run(self.client, "find_in_stream", [self.stream(queue)],
                                  [after, str(count), needle])
        return [text(stream_id) for stream_id in found], text(last)

    def scan_delayed(self, queue: str, needle: str, limit: int) -> list[tuple[bytes, float]]:
        """Delayed-set members (body, due ms) holding `needle` literally (ZSCAN MATCH),
        at most `limit`."""
        pattern = f"*{keys.glob_escape(needle)}*"
        found = []
        for body, score in self.client.zscan_iter(keys.delayed_key(self.prefix, queue),
                                                  match=pattern, count=1000):
            found.append((body, score))
            if len(found) >= limit:
                break
        return found

    def values(self, names: Sequence[str]) -> list[str | None]:
        """The string value of each key (MGET; one slot: keys of one queue), None if unset."""
        return [None if value is None else text(value) for value in self.client.mget(names)]

    def last_id(self, queue: str) -> str | None:
        """The newest entry's id (XREVRANGE + - COUNT 1); None for an empty stream."""
        rows = self.client.xrevrange(self.stream(queue), "+", "-", count=1)
        return text(rows[0][0]) if rows else None

    def delayed_count(self, queue: str) -> int:
        """ZCARD of the queue's delayed set."""
        return int(self.client.zcard(keys.delayed_key(self.prefix, queue)))

    def delayed_batch(self, queue: str, count: int) -> list[bytes]:
        """The first `count` members of the delayed set (ZRANGE 0 count-1)."""
        return list(self.client.zrange(keys.delayed_key(self.prefix, queue), 0, count - 1))

    def purge_stream(self, queue: str, items: Sequence[PurgeItem]) -> int:
        """Delete each entry that still waits (after the group's last-delivered id; a
        delivered one is running and kept), freeing the keys it holds where their value
        is still its own; one script (`lua/purge_stream.lua`). Returns how many went."""
        return self._purge("purge_stream", [self.stream(queue)], [self.group], items)

    def purge_delayed(self, queue: str, items: Sequence[PurgeItem]) -> int:
        """ZREM each member still in the delayed set and free its keys likewise
        (`lua/purge_delayed.lua`). Returns how many went."""
        return self._purge("purge_delayed", [keys.delayed_key(self.prefix, queue)], [],
                           items)

    def _purge(self, script: str, head_keys: list[str], head_args: list[str],
               items: Sequence[PurgeItem]) -> int:
        if not items:
            return 0
        call_keys = list(head_keys)
        args: list[Any] = [*head_args, str(len(items))]
        for item in items:
            args += [item.ref, str(len(item.releases))]
            for release in item.releases:
                call_keys.append(release.key)
                args.append(release.holder)
        return int(scripts.run(self.client, script, call_keys, args))


def _entry(queue: str, row: Any) -> StreamEntry:
    """An entry of `queue`'s stream, its body with its task id (`entries.entry_body`)."""
    stream_id, fields = row
    return StreamEntry(text(stream_id), entry_body(queue, text(stream_id), fields))
