"""The Redis side of the transactional outbox: clearing the marks of moved rows.

A row is moved by `enqueue.lua` (`UniqueLocks.add_reserved_many`), whose task-id slot
holds the row's mark (`keys.outbox_mark_key`) for a plain or lock-only message; once the
row is deleted from the database the mark has done its job and is deleted here.
Redis outage errors pass through.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class OutboxMarks:
    """The outbox marks under one client."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def clear(self, mark_keys: Sequence[str]) -> None:
        """DEL each mark, one pipelined round trip (none for no keys); any slots."""
        if not mark_keys:
            return
        pipe = self.client.pipeline(transaction=False)
        for key in mark_keys:
            pipe.delete(key)
        pipe.execute()
