"""Recovering pending entries: who holds what for how long (XPENDING), reclaiming the
idle ones of dead or stuck consumers (XCLAIM), and clearing what is left (XACK of deleted
entries, idle consumers): what the reclaimer (worker/reclaim.py) asks of the broker.

`StreamRecovery` is a part of `Broker` (its base class): it uses the broker's client,
consumer group and stream names. Redis outage errors pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ResponseError

from django_taskrunner.store import keys, scripts
from django_taskrunner.store.values import text

# An entry as read: (stream id, body or None when the entry was deleted meanwhile).
Entry = tuple[str, bytes | None]


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


class StreamRecovery:
    """The pending-entry commands of `Broker`, which sets `client`, `prefix`, `group`."""

    client: Any
    prefix: str
    group: str

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
            found[stream_id] = body_of(entries[0][1]) if entries else None
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
            claimed.extend((text(stream_id), body_of(fields)) for stream_id, fields in entries
                           if stream_id is not None)
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

    def last_seen_ms(self, consumers: Sequence[str]) -> dict[str, int | None]:
        """When each worker last wrote its heartbeat (`keys.worker_key`, field `seen`,
        epoch ms); None for one with no heartbeat (it expired: the worker is gone)."""
        pipe = self.client.pipeline(transaction=False)
        for consumer in consumers:
            pipe.hget(keys.worker_key(self.prefix, consumer), "seen")
        return {consumer: None if seen is None else int(seen)
                for consumer, seen in zip(consumers, pipe.execute(), strict=True)}

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


def body_of(fields: dict[bytes, bytes] | None) -> bytes | None:
    """The message body of an entry; None for an entry deleted while pending.

    An entry written by something else (no `m` field) yields its fields as text, which
    the worker then records as an undecodable message.
    """
    if not fields:
        return None
    body = fields.get(keys.ENTRY_FIELD)
    return body if body is not None else repr(fields).encode()
