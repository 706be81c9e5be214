"""Fair queues in Redis: per-key lists of waiting tasks, the ring of keys whose turn it
is, and the feeder that moves them onto their stream in turns (docs/flow-control.md,
"Fair queues"; the keys: `store/keys.py`, `fair_*`).

A `queue` argument is a stream name: a queue, a shard, or a priority level of either
(`"emails!9"`); each level has a ring of its own, so a higher priority is still served
first and turns are taken within a level. Every key of one name shares its hash tag.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django_taskrunner.store import keys, scripts
from django_taskrunner.store.connection import text
from django_taskrunner.store.records import Records, RecordWrite

PUSH_SCRIPTS = ("fair_push",)
# Seconds a queue stays fair after its last keyed task: meanwhile its tasks without a
# key wait as one more turn, the key "" (UNKEYED).
FAIR_QUEUE_TTL_S = 86400
# The ring member of the tasks without a key (a real key is never empty).
UNKEYED = ""


@dataclass(frozen=True)
class FairKey:
    """One key of a fair queue and how many of its tasks wait (`Fair.top_keys`)."""

    queue: str
    key: str
    waiting: int


class Fair:
    """Fair lists and rings on one client and key prefix.

    Index: `push`, `is_fair_queue` (dispatch) · `rings_in_use`, `feed` (the worker's
    fetcher) ·
    `top_keys`, `top_keys_of_queue`, `count_shard`, `waiting`
    (stats, admin) · `purge`, `purge_shard`.
    """

    def __init__(self, client: Any, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    def push(self, queue: str, fair_key: str, weight: int, bodies: Sequence[str],
             records: Sequence[RecordWrite] = ()) -> None:
        """Append `bodies` (one key's messages, oldest first) to the key's list of
        `queue`, the key joining the ring if it was not in it; their `records` ("queued",
        no stream entry yet) in the same pipelined round trip. `fair_key` UNKEYED: the
        turn of the queue's tasks without a key."""
        stored = Records(self.client, self.prefix)
        script_keys = [keys.fair_list_key(self.prefix, queue, fair_key),
                       keys.fair_ring_key(self.prefix, queue),
                       keys.fair_turns_key(self.prefix, queue),
                       keys.fair_queue_key(self.prefix, queue)]

        def build(pipe: Any) -> None:  # safe to send twice: HSETs, then the one push
            for record in records:
                stored.queue_new(pipe, record)
            scripts.queue(pipe, "fair_push", script_keys,
                          [fair_key, str(weight), str(FAIR_QUEUE_TTL_S), *bodies])

        scripts.execute_loading(self.client, build, PUSH_SCRIPTS)

    def is_fair_queue(self, queue: str) -> bool:
        """Whether a keyed task used `queue` (a shard or level) within FAIR_QUEUE_TTL_S:
        then its tasks without a key wait as one more turn."""
        return bool(self.client.exists(keys.fair_queue_key(self.prefix, queue)))

    def rings_in_use(self, shard: str) -> list[str]:
        """The level names of `shard` (highest first) that have fair tasks waiting: one
        pipelined EXISTS of each level's ring."""
        names = keys.fair_ring_names(shard)
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.exists(keys.fair_ring_key(self.prefix, name))
        return [name for name, found in zip(names, pipe.execute(), strict=True) if found]

    def feed(self, queue: str, count: int) -> int:
        """Move up to `count` waiting tasks of `queue` onto its stream, in turns across
        its keys (`fair_feed.lua`), then give their records the stream ids; how many."""
        reply = scripts.run(self.client, "fair_feed", [
            keys.fair_ring_key(self.prefix, queue), keys.fair_turns_key(self.prefix, queue),
            keys.stream_key(self.prefix, queue),
        ], [str(count), keys.fair_list_space(self.prefix, queue), keys.ENTRY_FIELD])
        records = Records(self.client, self.prefix)
        records.set_stream_ids(Records.promoted_entries(reply[2:]))
        return int(reply[0])

    def top_keys(self, queue: str, limit: int | None = 10) -> list[FairKey]:
        """The keys of `queue` (a queue, shard or level) with the most waiting tasks,
        most first: the ring's keys and their lists' lengths (two round trips; a ring
        holds only keys that have tasks waiting)."""
        ring = [text(key) for key in self.client.lrange(keys.fair_ring_key(self.prefix, queue),
                                                        0, -1)]
        pipe = self.client.pipeline(transaction=False)
        for key in ring:
            pipe.llen(keys.fair_list_key(self.prefix, queue, key))
        counts = pipe.execute() if ring else []
        found = [FairKey(queue, key, int(n)) for key, n in zip(ring, counts, strict=True)]
        return sorted(found, key=lambda item: (-item.waiting, item.key))[:limit]

    def waiting(self, queue: str, fair_key: str, start: int, count: int) -> list[bytes]:
        """Bodies of `fair_key`'s tasks of `queue` (a level) waiting for their turn, the
        next to run first, from index `start`: one LRANGE (the admin's Tasks page)."""
        return list(self.client.lrange(keys.fair_list_key(self.prefix, queue, fair_key),
                                       start, start + count - 1))

    def purge(self, queue: str) -> int:
        """Delete every fair list, the ring, turns and mark of `queue` (admin purge); the
        number of tasks dropped. The ring names every list that holds something."""
        ring_key = keys.fair_ring_key(self.prefix, queue)
        ring = [text(key) for key in self.client.lrange(ring_key, 0, -1)]
        lists = [keys.fair_list_key(self.prefix, queue, key) for key in ring]
        pipe = self.client.pipeline(transaction=False)
        for name in lists:
            pipe.llen(name)
        for name in [*lists, ring_key, keys.fair_turns_key(self.prefix, queue),
                     keys.fair_queue_key(self.prefix, queue)]:
            pipe.delete(name)
        return sum(int(n) for n in pipe.execute()[:len(lists)])

    def purge_shard(self, shard: str) -> int:
        """`purge` of every level of `shard` that has fair tasks waiting; how many."""
        return sum(self.purge(level) for level in self.rings_in_use(shard))

    def count_shard(self, shard: str) -> int:
        """How many fair tasks of `shard` (every level) wait for their turn."""
        return sum(item.waiting for level in self.rings_in_use(shard)
                   for item in self.top_keys(level, limit=None))

    def top_keys_of_queue(self, shards: Sequence[str], limit: int = 10) -> list[FairKey]:
        """The keys with most waiting tasks across `shards` and their levels, most first
        (a key waiting on several levels or shards is listed once per level)."""
        found = [item for shard in shards for level in self.rings_in_use(shard)
                 for item in self.top_keys(level, limit=None)]
        return sorted(found, key=lambda item: (-item.waiting, item.key))[:limit]
