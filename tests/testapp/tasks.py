"""Module-level fixture tasks, autodiscovered like any app's tasks.py.

Each records its runs in Redis under the test's prefix, so a test can count runs
made by worker threads or by other processes.
"""

from __future__ import annotations

import time
from typing import Any

from django_taskrunner import task
from django_taskrunner.conf import get_settings
from django_taskrunner.connection import get_redis


def runs_key() -> str:
    return f"{get_settings().PREFIX}:test:runs"


def record(name: str, payload: Any) -> None:
    key = payload.get("n") if isinstance(payload, dict) else payload
    get_redis().hincrby(runs_key(), f"{name}:{key}", 1)


@task
def noop(payload: Any) -> None:
    record("noop", payload)


@task(max_retry=2, retry_backoff=0)
def always_fails(payload: Any) -> None:
    record("always_fails", payload)
    raise ValueError(f"boom {payload}")


@task(max_retry=3, retry_backoff=0)
def fails_twice(payload: Any) -> None:
    record("fails_twice", payload)
    runs = int(get_redis().hget(runs_key(), f"fails_twice:{payload.get('n')}") or 0)
    if runs <= 2:
        raise RuntimeError("not yet")


@task
def sleeper(payload: Any) -> None:
    time.sleep(float(payload.get("seconds", 1)))
    record("sleeper", payload)


@task(queue="other")
def on_other_queue(payload: Any) -> None:
    record("on_other_queue", payload)


@task(takes_context=True)
def with_context(ctx: Any, payload: Any) -> None:
    get_redis().hset(runs_key(), f"ctx:{payload['n']}", f"{ctx.task_name}|{ctx.attempt}|{ctx.id}")


@task
def creates_row(payload: Any) -> None:
    from tests.testapp.models import Note

    Note.objects.create(text=str(payload["text"]))


def stamps_key() -> str:
    return f"{get_settings().PREFIX}:test:stamps"


@task
def stamp(payload: Any) -> None:
    """Counts its runs and records when each started (epoch ms), keyed by payload["n"]."""
    from django_taskrunner import clock

    client = get_redis()
    client.rpush(f"{stamps_key()}:{payload['n']}", clock.now_ms())
    record("stamp", payload)


@task(max_retry=1, retry_backoff=0.6)
def fails_once_with_backoff(payload: Any) -> None:
    """Fails its first attempt; retried after 0.6 s. Records each attempt's start."""
    from django_taskrunner import clock

    client = get_redis()
    client.rpush(f"{stamps_key()}:backoff:{payload['n']}", clock.now_ms())
    if client.hincrby(runs_key(), f"fails_once_with_backoff:{payload['n']}", 1) == 1:
        raise RuntimeError("first attempt fails")


@task(takes_context=True)
def count_by_id(ctx: Any, payload: Any) -> None:
    """Counts runs per message id (periodic occurrences have one id each)."""
    get_redis().hincrby(runs_key(), f"count_by_id:{ctx.id}", 1)
