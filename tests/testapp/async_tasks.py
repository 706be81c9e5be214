"""Fixture `async def` tasks; they record their runs like the ones in tasks.py.

Recording is a blocking Redis call, short enough not to matter to the event loop.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from asgiref.sync import sync_to_async

from django_taskrunner import TaskContext, get_redis, task
from tests.testapp.models import Note
from tests.testapp.tasks import record, runs_key


@task
async def async_ping(payload: Any) -> None:
    record("async_ping", payload)


@task
async def async_sleeper(payload: Any) -> None:
    record("async_sleeper:start", payload)
    await asyncio.sleep(float(payload.get("seconds", 0.5)))
    record("async_sleeper", payload)


@task(max_retry=2, retry_backoff=0)
async def async_fails_twice(payload: Any) -> None:
    record("async_fails_twice", payload)
    await asyncio.sleep(0)
    runs = int(get_redis().hget(runs_key(), f"async_fails_twice:{payload.get('n')}") or 0)
    if runs <= 2:
        raise RuntimeError(f"not yet ({runs})")


@task(max_retry=0, retry_backoff=0)
async def async_always_fails(payload: Any) -> None:
    record("async_always_fails", payload)
    raise ValueError(f"async boom {payload}")


@task(time_limit=0.3, max_retry=0)
async def async_never_finishes(payload: Any) -> None:
    record("async_never_finishes:start", payload)
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        record("async_never_finishes:cancelled", payload)
        raise


@task(time_limit=0.3, max_retry=0)
async def async_ignores_cancel(payload: Any) -> None:
    """Swallows the cancellation and goes on: the watchdog gives up on it after the grace."""
    record("async_ignores_cancel:start", payload)
    for _ in range(30):
        try:
            await asyncio.sleep(0.1)
        except asyncio.CancelledError:
            record("async_ignores_cancel:swallowed", payload)
    record("async_ignores_cancel:end", payload)


@task(takes_context=True)
async def async_with_context(ctx: TaskContext, payload: Any) -> None:
    record(f"async_with_context:{ctx.task_name}:{ctx.queue}:{ctx.attempt}", payload)
    record(f"async_with_context:beat:{ctx.heartbeat()}:cancelled:{ctx.cancelled}", payload)


@task
async def async_blocks_loop(payload: Any) -> None:
    """A sync call inside a coroutine: the event loop stalls, which the worker logs."""
    time.sleep(float(payload.get("seconds", 1.5)))
    record("async_blocks_loop", payload)


@task
def sync_returns_coroutine(payload: Any) -> Any:
    """A plain function that returns a coroutine: a mistake, failed with a clear message."""
    async def inner() -> None:
        record("sync_returns_coroutine:ran", payload)

    return inner()


@task
async def async_saves_note(payload: Any) -> None:
    """The ORM from a coroutine: an async method, and a sync call through sync_to_async."""
    note = await Note.objects.acreate(text=payload["text"])
    await sync_to_async(Note.objects.filter(pk=note.pk).update)(text=payload["text"] + "!")


@task(unique=True, unique_for=60)
async def async_unique(payload: Any) -> None:
    record("async_unique", payload)


@task
async def async_returns(payload: Any) -> Any:
    """tests/integration/test_records.py: an async task's return value in its record."""
    await asyncio.sleep(0)
    return {"async": payload["n"]}
