"""Reading the queues' state for the figures, the dashboard and the metrics: read-only.

A class of its own rather than more `Broker` methods: each read batches stream
inspection (XINFO GROUPS / CONSUMERS, XLEN, XRANGE) with the statistics keys written by
`store/stats.py` (stats hash, windows, minute hashes, worker heartbeats) in one
pipelined round trip, so it belongs to neither alone; and the broker stays the worker's
hot path. Every method returns plain values (text, ints, small frozen dataclasses).
Redis outage errors (`store.errors.REDIS_DOWN`) pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django_taskrunner.store import keys
from django_taskrunner.store.connection import text


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
