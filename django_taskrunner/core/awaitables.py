"""What the worker and eager mode share about coroutines: awaiting one to the end from
sync code, and refusing a plain function's awaitable (it would never run)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import async_to_sync


def returned_awaitable(task_name: str, result: Any) -> TypeError | None:
    """The error of a plain function that returned an awaitable (None if it did not).

    The awaitable is never awaited, so it must not pass for a success; a coroutine is
    closed, so Python does not also warn that it was never awaited.
    """
    if not inspect.isawaitable(result):
        return None
    if inspect.iscoroutine(result):
        result.close()
    return TypeError(
        f"task {task_name!r} is a plain function that returned {type(result).__name__}, "
        f"which was not awaited; declare the task with `async def` to have it awaited")


def run_to_end(coroutine: Any) -> Any:
    """Await `coroutine` to the end from sync code, the way Django does: with asgiref's
    `async_to_sync`, so `sync_to_async` calls inside it (the async ORM methods) run back
    on this thread, with its database connection (in a TestCase, its transaction). When
    this thread already runs a loop (an async test or view), on a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return async_to_sync(_awaiting(coroutine))()
    with ThreadPoolExecutor(1, "taskrunner-await") as thread:
        return thread.submit(asyncio.run, coroutine).result()


def _awaiting(coroutine: Any) -> Callable[[], Coroutine[Any, Any, Any]]:
    async def awaited() -> Any:
        return await coroutine

    return awaited
