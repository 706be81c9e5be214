"""The worker processes, as the Workers page lists them, and a stopping worker leaving
its consumer groups.

`keys.workers_key` (a sorted set, consumer -> last heartbeat in epoch ms) says who
there is; each one's `keys.worker_key` hash (written with a TTL by its heartbeat,
`store/stats.py`) says what it is. A name in the set whose hash expired is a worker that
stopped beating without a clean stop: listed as lost until the set drops it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django_taskrunner.store import keys, scripts
from django_taskrunner.store.errors import REPLY_ERROR
from django_taskrunner.store.values import text


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
