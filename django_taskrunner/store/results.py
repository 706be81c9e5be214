"""Django Tasks framework results: one JSON record per result id, with a TTL.

The record is opaque text here (`backends.py` builds and reads it). Keys come from
`keys.result_key` (not queue-tagged: a result is found by its id alone). Redis outage
errors (`errors.REDIS_DOWN`) pass through unchanged.
"""

from __future__ import annotations

from typing import Any

from django_taskrunner.store import keys
from django_taskrunner.store.values import text


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
