"""Paused queues: one hash, queue name -> when it was paused (epoch ms).

Written by `pause_queue`/`resume_queue` (and the admin's buttons), read by each worker
every fraction of a second (`worker/pauses.py`) and by the pages and commands that show
queues. A key of the wrong type under the name reads as "nothing paused" for the worker
(it logs it), so a stray key never stops a worker; pausing then says what is wrong.
"""

from __future__ import annotations

from typing import Any

from django_taskrunner.store import keys
from django_taskrunner.store.values import text


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
