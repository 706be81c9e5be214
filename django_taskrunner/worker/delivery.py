"""`Delivery`: one stream entry as the worker holds it, from its read to its ack.

The shard (the stream it was read from) travels here, beside the message, so that
`TaskMessage.queue` always names the queue: the ack, the retry, the heartbeat and the
lock release use `shard`; figures, failed rows and the task's context use `queue`.
"""

from __future__ import annotations

from dataclasses import dataclass

from django_taskrunner.store import keys


@dataclass(frozen=True, slots=True)
class Delivery:
    """An entry read (or reclaimed) from one stream, not yet finished."""

    shard: str  # the stream: a queue, or one shard of it ("emails#2", see core/sharding.py)
    stream_id: str
    body: bytes | None  # None: deleted from the stream while pending
    runs: int | None = None  # delivery counter of a reclaimed entry; None when fresh
    accepted: float = 0.0  # monotonic time it entered the worker's buffer

    @property
    def queue(self) -> str:
        """The queue the shard belongs to (the shard itself for a queue not split)."""
        return keys.queue_of(self.shard)
