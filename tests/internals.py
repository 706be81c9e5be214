"""The internals many tests share, each reached once, here.

Tests reach the product through `django_taskrunner`, its store (`get_store()`) and its
models; a few facts have no public face: the value a unique lock holds, how long a task
id and a pending task's steps are kept, the task registry a test adds throwaway tasks
to, and the heartbeat a worker writes. Named here, a move inside the package changes
this module, not the tests.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from django_taskrunner import TaskMessage
from django_taskrunner.core.records import PENDING_TTL_S
from django_taskrunner.core.registry import registry
from django_taskrunner.core.unique import TASK_ID_TTL_MS
from django_taskrunner.core.unique import holder_value as _holder_value
from django_taskrunner.stats.recorder import WorkerReport, write
from django_taskrunner.store import get_store

__all__ = ["PENDING_TTL_S", "TASK_ID_TTL_MS", "holder_value", "registered_names",
           "saved_registry", "stream_messages", "unregister_task", "write_heartbeat"]


def holder_value(message: TaskMessage) -> str:
    """What the unique lock (and task-id key) of `message` holds while it is the holder."""
    return _holder_value(message)


def stream_messages(queue: str = "default") -> list[TaskMessage]:
    """Every message on `queue`'s stream (a queue, shard or level name), oldest first,
    decoded as a worker reads it: through the store's reader, which puts a plain
    dispatch's task id (its entry's) in its body."""
    entries = get_store().browse.waiting_after(queue, "0-0", 1_000_000)
    return [TaskMessage.from_json(entry.body, stream_id=entry.stream_id) for entry in entries]


def registered_names() -> set[str]:
    """The names of every registered task."""
    return set(registry._registry)


def unregister_task(name: str) -> None:
    """Forget a task a test declared (its name may be declared again)."""
    registry.unregister(name)


@contextlib.contextmanager
def saved_registry() -> Iterator[None]:
    """Put the task registry back as it was when the block ends."""
    saved = dict(registry._registry)
    try:
        yield
    finally:
        registry._registry.clear()
        registry._registry.update(saved)


def write_heartbeat(pipe: Any, consumer: str, queues: Sequence[str], *, threads: int, busy: int,
                    max_workers: int, started_ms: int, now_ms: int, ttl: float,
                    window: int = 200, min_workers: int | None = None,
                    figures: Any = None) -> None:
    """Queue on `pipe` what a worker's monitor writes: its heartbeat and `figures` (a
    recorder's drained batch, none by default); the caller executes the pipeline."""
    report = WorkerReport(consumer, queues, threads=threads, busy=busy,
                          min_workers=min_workers, max_workers=max_workers,
                          started_ms=started_ms)
    write(pipe, get_store().stats, figures or {}, report, now_ms=now_ms, window=window, ttl=ttl)
