"""Writing the statistics: the stats hashes, run-time windows, minute counts, worker
heartbeats and the long-queue gate (the layout is described in `store/keys.py`); and the
worker processes, as the Workers page lists them (below).

`StatsStore` takes plain values (hash fields and amounts, run times in microseconds,
heartbeat fields) and knows nothing of tasks or recorders. Reading these keys is
`store/inspect.py`'s job, because each read shares its round trip with stream
inspection. Redis outage errors (`store.errors.REDIS_DOWN`) pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django_taskrunner.store import keys, scripts
from django_taskrunner.store.connection import text
from django_taskrunner.store.errors import REPLY_ERROR

STATS_TTL_SECONDS = 7 * 24 * 3600  # totals of a queue nobody used for a week go away
MINUTE_TTL_SECONDS = 2 * 3600
# A worker whose heartbeat stopped (lost: killed, crashed, cut off) stays listed, marked
# lost, this long after its last heartbeat.
WORKERS_KEPT_MS = 15 * 60 * 1000


@dataclass(frozen=True)
class QueueWrite:
    """What to add to one queue's statistics in one flush.

    `increments` are stats hash fields and the amounts to HINCRBY, in order; `windows`
    are (task name, or None for the queue's own window, run times in microseconds oldest
    first); `outcomes` are the minute hash's `succeeded failed retried` counts.
    """

    queue: str
    increments: Sequence[tuple[str, int]] = ()
    windows: Sequence[tuple[str | None, Sequence[int]]] = ()
    outcomes: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkerBeat:
    """A worker's heartbeat: its hash fields and the queues it consumes."""

    consumer: str
    queues: Sequence[str]
    fields: Mapping[str, str]


class StatsStore:
    """The statistics keys of one Redis client and key prefix (write side)."""

    def __init__(self, client: Any, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    def write_figures(self, writes: Sequence[QueueWrite], beat: WorkerBeat, *, now_ms: int,
                      window: int, ttl: float, pipe: Any = None) -> None:
        """Add `writes` and refresh `beat`, in one pipelined round trip (any slots).

        Per queue: HINCRBY on `keys.stats_key` (EXPIRE a week), LPUSH + LTRIM to `window`
        + EXPIRE on each `keys.window_key`, HINCRBY + EXPIRE (two hours) on the minute's
        `keys.minute_key` when an outcome is counted. Then the heartbeat: HSET + EXPIRE
        `ttl` on `keys.worker_key`, ZADD + ZREMRANGEBYSCORE (lost for long) on
        `keys.workers_key`, and per queue ZADD (expiry time) + ZREMRANGEBYSCORE
        (expired workers) + EXPIRE on `keys.queue_workers_key`. With `pipe`, the commands
        are only queued on it and the caller executes it.
        """
        own = pipe is None
        pipe = self.client.pipeline(transaction=False) if own else pipe
        for write in writes:
            self._queue_write(pipe, write, now_ms=now_ms, window=window)
        self._queue_beat(pipe, beat, now_ms=now_ms, ttl=ttl)
        if beat.queues:  # the queues it consumes were seen now (the leader forgets the rest)
            pipe.zadd(keys.queues_seen_key(self.prefix), dict.fromkeys(beat.queues, now_ms))
        if own:
            pipe.execute()

    def add_figures(self, writes: Sequence[QueueWrite], *, now_ms: int, window: int) -> None:
        """Add `writes` with no heartbeat, in one pipelined round trip (the keys of
        `write_figures`): the attempts a supervisor settled for a child that died."""
        if not writes:
            return
        pipe = self.client.pipeline(transaction=False)
        for write in writes:
            self._queue_write(pipe, write, now_ms=now_ms, window=window)
        pipe.execute()

    def _queue_write(self, pipe: Any, write: QueueWrite, *, now_ms: int, window: int) -> None:
        stats = keys.stats_key(self.prefix, write.queue)
        windows = dict(write.windows)
        for task_name, samples in write.windows:
            if task_name is not None:
                self._push_window(pipe, keys.window_key(self.prefix, write.queue, task_name),
                                  samples, window)
        for name, amount in write.increments:
            pipe.hincrby(stats, name, amount)
        pipe.expire(stats, STATS_TTL_SECONDS)
        self._push_window(pipe, keys.window_key(self.prefix, write.queue),
                          windows.get(None, ()), window)
        if any(write.outcomes.values()):
            minute = keys.minute_key(self.prefix, write.queue, now_ms // 60_000)
            for name, count in write.outcomes.items():
                if count:
                    pipe.hincrby(minute, name, count)
            pipe.expire(minute, MINUTE_TTL_SECONDS)

    @staticmethod
    def _push_window(pipe: Any, key: str, samples: Sequence[int], window: int) -> None:
        """Newest first: LPUSH puts its last argument at the head."""
        if not samples:
            return
        pipe.lpush(key, *list(samples)[-window:])
        pipe.ltrim(key, 0, window - 1)
        pipe.expire(key, STATS_TTL_SECONDS)

    def _queue_beat(self, pipe: Any, beat: WorkerBeat, *, now_ms: int, ttl: float) -> None:
        worker = keys.worker_key(self.prefix, beat.consumer)
        ttl_s = max(1, round(ttl))
        # `ttl`: the TTL this write gives the hash, so the heartbeat's age is read by the
        # server's clock (`Broker.heartbeat_ages_ms`: ttl less PTTL), not the worker's.
        pipe.hset(worker, mapping={**beat.fields, "ttl": str(ttl_s)})
        pipe.expire(worker, ttl_s)
        expires_ms = now_ms + round(ttl * 1000)
        directory = keys.workers_key(self.prefix)  # the Workers page (store/stats.py)
        pipe.zadd(directory, {beat.consumer: now_ms})
        pipe.zremrangebyscore(directory, "-inf", now_ms - WORKERS_KEPT_MS)
        for queue in beat.queues:
            index = keys.queue_workers_key(self.prefix, queue)
            pipe.zadd(index, {beat.consumer: expires_ms})
            pipe.zremrangebyscore(index, "-inf", now_ms)
            pipe.expire(index, max(1, round(ttl)))

    def remove_heartbeat(self, consumer: str, queues: Sequence[str]) -> None:
        """DEL `keys.worker_key` and ZREM the consumer from each queue's
        `keys.queue_workers_key`, in one pipelined round trip: a worker that stops
        cleanly stops counting at once."""
        pipe = self.client.pipeline(transaction=False)
        pipe.delete(keys.worker_key(self.prefix, consumer))
        pipe.zrem(keys.workers_key(self.prefix), consumer)
        for queue in queues:
            pipe.zrem(keys.queue_workers_key(self.prefix, queue), consumer)
        pipe.execute()

    def open_gate(self, queue: str, holder: str, cooldown_ms: int) -> bool:
        """SET NX PX `keys.long_queue_gate_key`: True when this call set it (the hook may
        fire), False while it is held (fired less than a cooldown ago). One round trip."""
        return bool(self.client.set(keys.long_queue_gate_key(self.prefix, queue), holder,
                                    nx=True, px=cooldown_ms))


# The worker processes, as the Workers page lists them, and a stopping worker leaving
# its consumer groups.
#
# `keys.workers_key` (a sorted set, consumer -> last heartbeat in epoch ms) says who
# there is; each one's `keys.worker_key` hash (written with a TTL by its heartbeat,
# `store/stats.py`) says what it is. A name in the set whose hash expired is a worker that
# stopped beating without a clean stop: listed as lost until the set drops it.

@dataclass(frozen=True)
class WorkerEntry:
    """One worker process: its consumer name, last heartbeat (epoch ms), and its hash
    fields (None when the hash expired or cannot be read: `unreadable` says which)."""

    name: str
    seen_ms: int
    fields: dict[str, str] | None
    unreadable: bool = False


class WorkerDirectory:
    """The worker processes of one prefix."""

    def __init__(self, client: Any, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    def page(self, start: int, size: int) -> tuple[list[WorkerEntry], int]:
        """Workers `start` to `start + size`, latest heartbeat first, with their hashes,
        and how many there are: two round trips."""
        directory = keys.workers_key(self.prefix)
        pipe = self.client.pipeline(transaction=False)
        pipe.zrevrange(directory, start, start + size - 1, withscores=True)
        pipe.zcard(directory)
        found, total = pipe.execute()
        names = [(text(name, errors="replace"), int(score)) for name, score in found]
        return self._with_fields(names), int(total)

    def _with_fields(self, names: Sequence[tuple[str, int]]) -> list[WorkerEntry]:
        pipe = self.client.pipeline(transaction=False)
        for name, _seen in names:
            pipe.hgetall(keys.worker_key(self.prefix, name))
        replies = pipe.execute(raise_on_error=False) if names else []
        entries = []
        for (name, seen), raw in zip(names, replies, strict=True):
            if isinstance(raw, REPLY_ERROR):
                entries.append(WorkerEntry(name, seen, None, unreadable=True))
                continue
            fields = {text(k, errors="replace"): text(v, errors="replace")
                      for k, v in raw.items()}
            entries.append(WorkerEntry(name, seen, fields or None))
        return entries

    def forget_consumer(self, stream: str, group: str, consumer: str) -> bool:
        """Remove `consumer` from `stream`'s group if it holds nothing (a clean stop)."""
        return bool(scripts.run(self.client, "forget_consumer",
                                [keys.stream_key(self.prefix, stream)], [group, consumer]))
