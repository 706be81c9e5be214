"""Fixture tasks for eager mode: they leave rows (Note) in the caller's database, so a
TestCase sees what they did without any Redis."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_save

from django_taskrunner import TaskContext, dispatch_on, task
from tests.testapp.models import Note

# How many times each eager fixture ran, by text (attempts included).
calls: dict[str, int] = {}


def note(text: str) -> None:
    calls[text] = calls.get(text, 0) + 1
    Note.objects.create(text=text)


@task
def eager_note(payload: Any) -> str:
    note(f"note:{payload['text']}:{type(payload['items']).__name__}" if "items" in payload
         else f"note:{payload['text']}")
    return "returned"


@task(max_retry=2, retry_backoff=5)
def eager_flaky(payload: Any) -> None:
    note(f"flaky:{payload['text']}")
    if calls[f"flaky:{payload['text']}"] <= payload.get("fails", 99):
        raise RuntimeError("flaky failed")


@task(takes_context=True)
def eager_with_context(ctx: TaskContext, payload: Any) -> None:
    note(f"ctx:{ctx.task_name}:{ctx.attempt}:{ctx.cancelled}:{ctx.heartbeat()}")


@task(unique=True, unique_for=60, unique_key=lambda payload: payload["text"])
def eager_unique(payload: Any) -> None:
    note(f"unique:{payload['text']}")
    if payload.get("again"):  # a duplicate dispatched while this one runs
        eager_unique.dispatch({"text": payload["text"]})


@task(unique=True, unique_for=60, unique_mode="while_locked")
def eager_while_locked(payload: Any) -> None:
    note("while_locked")


@task
def eager_redispatches_own_id(payload: Any) -> None:
    note("own_id")
    eager_note.dispatch({"text": "inner"}, task_id=payload["task_id"])


@task
async def eager_async(payload: Any) -> None:
    await Note.objects.acreate(text=f"async:{payload['text']}")


@task
def eager_on_note(payload: Any) -> None:
    """Counts only (a Note saved here would dispatch it again)."""
    key = f"seen:{payload['text']}"
    calls[key] = calls.get(key, 0) + 1


def connect_note_saved() -> Any:
    """Dispatch `eager_on_note` after each Note saved (on commit): returns the receiver."""
    return dispatch_on(post_save, eager_on_note, sender=Note,
                       payload=lambda instance, **kwargs: {"text": instance.text})


def disconnect_note_saved() -> None:
    """Undo `connect_note_saved`. dispatch_on connects with a dispatch_uid, and Django
    disconnects such a receiver by that uid only (passing the receiver finds nothing)."""
    uid = f"django_taskrunner:{eager_on_note.name}:{id(post_save)}:{id(Note)}"
    assert post_save.disconnect(sender=Note, dispatch_uid=uid)


@task
async def eager_async_counts(payload: Any) -> None:
    """No database: safe to run on the thread eager mode starts inside a running loop."""
    key = f"async_counts:{payload['text']}"
    calls[key] = calls.get(key, 0) + 1
