"""Scheduling state in Redis: the known queues, wake-ups, periodic marks, the delayed
sets as the admin reads and edits them, the leader's lease and the paused queues. The
Redis side of `scheduling/`, of `admin/delayed.py` and of `pause_queue()`.

The moves themselves (due delayed messages onto the stream) stay `Broker.promote_due`,
one script call per batch. Every name is a queue or one shard of one (see core/sharding.py);
bodies are the opaque message JSON, returned as redis-py gives them (bytes). Redis outage
errors (`errors.REDIS_DOWN`) pass through every method unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from django_taskrunner.store import keys, scripts
from django_taskrunner.store.connection import WakeSubscription, text
from django_taskrunner.store.errors import stalls_writes
from django_taskrunner.store.records import Records

# A delayed entry as read: (body, score = due time in ms).
DelayedRow = tuple[bytes, float]


class ScheduleStore:
    """The scheduling keys under one client and key prefix."""

    def __init__(self, client: Any, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    # -- queues and wake-ups (scheduler) --------------------------------------------------

    def add_known_queues(self, names: Sequence[str], now_ms: int | None = None, *,
                         used: bool = False) -> None:
        """ZADD queue names to `keys.queues_seen_key` at `now_ms` (the server's clock
        when None), and with `used` (a dispatch) to `keys.queues_used_key` too; one round
        trip, nothing for no names."""
        if not names:
            return
        if now_ms is None:
            seconds, micros = self.client.time()
            now_ms = int(seconds) * 1000 + int(micros) // 1000
        scores = dict.fromkeys(names, now_ms)
        pipe = self.client.pipeline(transaction=False)
        pipe.zadd(keys.queues_seen_key(self.prefix), scores)
        if used:
            pipe.zadd(keys.queues_used_key(self.prefix), scores)
        pipe.execute()

    def known_queues(self) -> set[str]:
        """Every known queue: the members of `keys.queues_seen_key` and of the older
        plain set `keys.known_queues_key` (one round trip)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.zrange(keys.queues_seen_key(self.prefix), 0, -1)
        pipe.smembers(keys.known_queues_key(self.prefix))
        seen, legacy = pipe.execute()
        return {text(name) for name in (*seen, *legacy)}

    def used_queues(self, since_ms: int) -> set[str]:
        """ZRANGEBYSCORE of `keys.queues_used_key`: the queues a dispatch used since
        `since_ms`."""
        return {text(name) for name in self.client.zrangebyscore(
            keys.queues_used_key(self.prefix), since_ms, "+inf")}

    def queue_sightings(self) -> dict[str, int]:
        """Each known queue and when it was last seen (ms); the older plain set's members
        are first folded in, seen now (ZADD NX, then DEL of the set)."""
        legacy_key = keys.known_queues_key(self.prefix)
        seen_key = keys.queues_seen_key(self.prefix)
        legacy = self.client.smembers(legacy_key)
        if legacy:
            seconds, micros = self.client.time()
            now_ms = int(seconds) * 1000 + int(micros) // 1000
            pipe = self.client.pipeline(transaction=False)
            pipe.zadd(seen_key, dict.fromkeys((text(name) for name in legacy), now_ms), nx=True)
            pipe.srem(legacy_key, *legacy)
            pipe.execute()
        return {text(name): int(score)
                for name, score in self.client.zrange(seen_key, 0, -1, withscores=True)}

    def holds_messages(self, shards: Sequence[str]) -> bool:
        """XLEN of each shard's stream and ZCARD of its delayed set, one pipeline: True
        when any holds an entry."""
        pipe = self.client.pipeline(transaction=False)
        for shard in shards:
            pipe.xlen(keys.stream_key(self.prefix, shard))
            pipe.zcard(keys.delayed_key(self.prefix, shard))
        return any(int(count) for count in pipe.execute())

    def forget_queue(self, name: str, cutoff_ms: int) -> bool:
        """`forget_queue.lua`: ZREM the queue from the seen set unless it was seen at or
        after `cutoff_ms`, then (when it was) from the used set; True when forgotten."""
        forgotten = bool(scripts.run(self.client, "forget_queue",
                                     [keys.queues_seen_key(self.prefix)], [name, str(cutoff_ms)]))
        if forgotten:
            self.client.zrem(keys.queues_used_key(self.prefix), name)
        return forgotten

    def subscription(self) -> WakeSubscription:
        """A new pub/sub connection, subscribed to nothing yet."""
        return WakeSubscription(self.client.pubsub())

    # -- periodic schedules --------------------------------------------------------------

    def mark_schedules(self, schedules: Sequence[tuple[str, str]],
                       now_ms: int) -> list[int | None]:
        """For each (shard, schedule id): HSETNX its mark in `keys.periodic_key` to `now_ms`
        and HGET it, all pipelined in one round trip; the marks (last occurrence fired, ms).

        A mark that cannot be read (its shard's key of another type, a field that is not
        a number) is None: that schedule is spoiled, not the others. A Redis that is
        down or refuses writes raises, as any command does."""
        if not schedules:
            return []
        pipe = self.client.pipeline(transaction=False)
        for shard, schedule_id in schedules:
            mark_key = keys.periodic_key(self.prefix, shard)
            pipe.hsetnx(mark_key, schedule_id, now_ms)
            pipe.hget(mark_key, schedule_id)
        replies = pipe.execute(raise_on_error=False)
        for reply in replies:
            if isinstance(reply, Exception) and stalls_writes(reply):
                raise reply
        return [_mark(reply) for reply in replies[1::2]]

    def fire_periodic(self, shard: str, schedule_id: str, occurrence_ms: int, body: str,
                      fair: bool = False) -> bool:
        """fire_periodic.lua: XADD `body` to the shard's stream unless this occurrence (or a
        later one) was fired, moving the mark; True when it was added. A `fair` message
        goes to the delayed set, due now, to join its key's turn (store/fair.py)."""
        if not fair:
            return bool(scripts.run(
                self.client, "fire_periodic",
                [keys.periodic_key(self.prefix, shard), keys.stream_key(self.prefix, shard)],
                [schedule_id, str(occurrence_ms), body]))
        return bool(scripts.run(
            self.client, "fire_periodic",
            [keys.periodic_key(self.prefix, shard), keys.delayed_key(self.prefix, shard)],
            [schedule_id, str(occurrence_ms), body, keys.wake_channel(self.prefix, shard)]))

    def announce_periodic_change(self, now_ms: int) -> None:
        """PUBLISH `now_ms` on `keys.periodic_channel`: the leader rereads the schedules."""
        self.client.publish(keys.periodic_channel(self.prefix), now_ms)

    # -- delayed sets, as the admin reads and edits them ---------------------------------

    def count_delayed(self, shards: Sequence[str]) -> list[int]:
        """ZCARD of each shard's delayed set, pipelined in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for shard in shards:
            pipe.zcard(keys.delayed_key(self.prefix, shard))
        return [int(count) for count in pipe.execute()]

    def delayed_range(self, shard: str, start: int, stop: int) -> list[DelayedRow]:
        """ZRANGE start stop WITHSCORES (by due time, `stop` inclusive) of one delayed set."""
        return self.client.zrange(keys.delayed_key(self.prefix, shard), start, stop,
                                  withscores=True)

    def delayed_heads(self, shards: Sequence[str], count: int) -> list[list[DelayedRow]]:
        """The first `count` entries of each shard's delayed set, in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for shard in shards:
            pipe.zrange(keys.delayed_key(self.prefix, shard), 0, count - 1, withscores=True)
        return pipe.execute()

    def scan_delayed(self, shard: str, match: str) -> Iterator[DelayedRow]:
        """ZSCAN a delayed set with MATCH `match` (COUNT 1000 per call), lazily."""
        return self.client.zscan_iter(keys.delayed_key(self.prefix, shard), match=match,
                                      count=1000)

    def delayed_at(self, shard: str, due_ms: int) -> list[DelayedRow]:
        """ZRANGEBYSCORE due_ms due_ms WITHSCORES: the entries due at exactly `due_ms`."""
        return self.client.zrangebyscore(keys.delayed_key(self.prefix, shard), due_ms, due_ms,
                                         withscores=True)

    def take_delayed(self, shard: str, due_ms: int, message_id: str, run: bool) -> bytes | None:
        """take_delayed.lua: remove the entry due at `due_ms` whose id is `message_id`, and
        XADD it to the stream when `run` (its record, if any, then learns its entry);
        its body, or None when it is not waiting."""
        reply = scripts.run(
            self.client, "take_delayed",
            [keys.delayed_key(self.prefix, shard), keys.stream_key(self.prefix, shard)],
            [str(due_ms), message_id, "run" if run else "cancel"])
        if not reply:
            return None
        body, stream_id = reply
        if stream_id:
            Records(self.client, self.prefix).set_stream_ids(
                [(message_id, "", text(stream_id))])
        return body


def _mark(reply: Any) -> int | None:
    """A periodic mark as written (epoch ms), or None when it is not one."""
    try:
        return None if isinstance(reply, Exception) else int(reply)
    except (TypeError, ValueError):
        return None


# A lease on one key: the Redis side of `scheduling/election.py`.
#
# The key holds the holder's identity (a str) with a PX TTL. It is taken with SET NX PX,
# extended only by its holder (`lua/lease_renew.lua`, compare-and-extend) and deleted
# only by its holder (`lua/lease_release.lua`, compare-and-delete), so a process that lost
# the lease can never extend or delete its successor's. Every method is one round trip;
# Redis outage errors (`errors.REDIS_DOWN`) pass through unchanged.

class Lease:
    """One lease key (e.g. `keys.leader_key`) on one client."""

    def __init__(self, client: Any, key: str) -> None:
        self.client = client
        self.key = key

    def take(self, identity: str, ttl_ms: int) -> bool:
        """SET key identity NX PX ttl_ms: True when the lease was free and is now ours."""
        return bool(self.client.set(self.key, identity, nx=True, px=ttl_ms))

    def renew(self, identity: str, ttl_ms: int) -> bool:
        """PEXPIRE the key to `ttl_ms` if `identity` holds it; False when it does not."""
        return bool(scripts.run(self.client, "lease_renew", [self.key], [identity, ttl_ms]))

    def release(self, identity: str) -> bool:
        """DEL the key if `identity` holds it; True when it did."""
        return bool(scripts.run(self.client, "lease_release", [self.key], [identity]))

    def holder(self) -> str | None:
        """GET: the identity holding the lease, or None."""
        value = self.client.get(self.key)
        return None if value is None else text(value)

    def expire_broken(self, ttl_ms: int) -> None:
        """PEXPIRE the key, whatever it holds: a key with no expiry or of another type
        (no lease of ours) then goes by itself, and the lease can be taken again."""
        self.client.pexpire(self.key, ttl_ms)

    def ttl_ms(self) -> int:
        """PTTL: milliseconds the lease has left; negative when gone (-2) or without TTL."""
        return int(self.client.pttl(self.key))


# Paused queues: one hash, queue name -> when it was paused (epoch ms).
#
# Written by `pause_queue`/`resume_queue` (and the admin's buttons), read by each worker
# every fraction of a second (`worker/turns.py`) and by the pages and commands that show
# queues. A key of the wrong type under the name reads as "nothing paused" for the worker
# (it logs it), so a stray key never stops a worker; pausing then says what is wrong.

class Pauses:
    """The paused queues of one prefix."""

    def __init__(self, client: Any, prefix: str) -> None:
        self.client = client
        self.prefix = prefix
        self.key = keys.paused_queues_key(prefix)

    def pause(self, queue: str, now_ms: int) -> bool:
        """Mark `queue` paused; False when it was already (its first pause time stays)."""
        return bool(self.client.hsetnx(self.key, queue, now_ms))

    def resume(self, queue: str) -> bool:
        """Unmark `queue`; False when it was not paused."""
        return bool(self.client.hdel(self.key, queue))

    def paused(self) -> dict[str, int]:
        """Every paused queue and when it was paused (epoch ms; 0 if unreadable)."""
        raw = self.client.hgetall(self.key)
        return {text(name, errors="replace"): int(value) if value.isdigit() else 0
                for name, value in raw.items()}
