"""Tasks written against Django's Tasks framework (django.tasks, or the backport)."""

from __future__ import annotations

from django_taskrunner import get_redis
from django_taskrunner.compat import task
from tests.testapp.tasks import runs_key


@task
def add(a: int, b: int) -> int:
    get_redis().hincrby(runs_key(), "framework:add", 1)
    return a + b


@task(queue_name="framework")
def on_framework_queue(text: str) -> str:
    return text.upper()


@task
def fails(message: str) -> None:
    raise ValueError(message)


@task(takes_context=True)
def with_context(context, tag: str) -> dict:
    return {"attempt": context.attempt, "id": context.task_result.id, "tag": tag}


@task
def note_order(tag: str) -> None:
    """Appends `tag` to a list: the order the worker started the tasks in."""
    get_redis().rpush(f"{runs_key()}:order", tag)
