"""Database rows as Redis sees them: the outbox's marks of moved rows, and the
`FailedTask` rows kept in Redis while the database refuses them (below).

The outbox: clearing the marks of moved rows.

A row is moved by `enqueue.lua` (`UniqueLocks.add_reserved_many`), whose task-id slot
holds the row's mark (`keys.outbox_mark_key`) for a plain or lock-only message; once the
row is deleted from the database the mark has done its job and is deleted here.
Redis outage errors pass through.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django_taskrunner.store import keys
from django_taskrunner.store.connection import text


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


# The `FailedTask` rows waiting in Redis for the database (`keys.failed_rows_key`).
#
# When a task fails for good and its row cannot be written (the database is down, or
# lacks the table), the worker keeps the row here, finishes the task (its record says
# "failed", its entry is acked) and the leader writes the row later
# (`worker/failures.py`). One hash field per dispatch ("<message id>|<dispatch token>"),
# so keeping the same failure twice leaves one row to write.

class FailedRows:
    """The waiting rows under one client and key prefix."""

    def __init__(self, client: Any, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    @property
    def key(self) -> str:
        return keys.failed_rows_key(self.prefix)

    def keep(self, row_id: str, row: str) -> None:
        """HSET one row (JSON text) under its dispatch's id."""
        self.client.hset(self.key, row_id, row)

    def batch(self, count: int) -> list[tuple[str, str]]:
        """Up to about `count` waiting rows, as (row id, JSON text): one HSCAN call."""
        _cursor, found = self.client.hscan(self.key, 0, count=count)
        return [(text(row_id), text(row, "replace")) for row_id, row in found.items()]

    def forget(self, row_ids: Sequence[str]) -> None:
        """HDEL rows written (or given up); nothing for no ids."""
        if row_ids:
            self.client.hdel(self.key, *row_ids)

    def count(self) -> int:
        """HLEN: how many rows wait."""
        return int(self.client.hlen(self.key))
