"""The internals many tests share, each reached once, here.

Tests reach the product through `django_taskrunner`, its store (`get_store()`) and its
models; a few facts have no public face: the value a unique lock holds, how long a task id
and a pending task's steps are kept, and the task registry a test adds throwaway tasks
to. Named here, a move inside the package changes this module, not the tests.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django_taskrunner import TaskMessage
from django_taskrunner.core.records import PENDING_TTL_S
from django_taskrunner.core.registry import registry
from django_taskrunner.core.unique import TASK_ID_TTL_MS
from django_taskrunner.core.unique import holder_value as _holder_value

__all__ = ["PENDING_TTL_S", "TASK_ID_TTL_MS", "holder_value", "registered_names",
           "saved_registry", "unregister_task"]


def holder_value(message: TaskMessage) -> str:
    """What the unique lock (and task-id key) of `message` holds while it is the holder."""
    return _holder_value(message)


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
