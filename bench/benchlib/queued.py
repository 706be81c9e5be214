"""Messages queued and read in the benchmark's own process, as a worker's fetcher reads
them: for the scripts that run the executor or the acker without a worker."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def queued_and_read(task: Any, payloads: Sequence[Any], queue: str,
                    consumer: str) -> list[tuple[str, Any]]:
    """Dispatch one message of `task` per payload (`dispatch_many`), then read them all
    from `queue` as `consumer`: (stream id, body) of each."""
    from django_taskrunner.store import get_store

    broker = get_store().streams
    broker.ensure_group(queue)
    task.dispatch_many(list(payloads))
    entries: list[tuple[str, Any]] = []
    while len(entries) < len(payloads):
        entries += broker.read(queue, consumer, 1000, None)
    return entries
