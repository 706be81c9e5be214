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


# -- reliability: time limits, expiry, reservation timeouts -------------------------


@task(takes_context=True, time_limit=0.3, max_retry=1, retry_backoff=0)
def stops_when_cancelled(ctx: Any, payload: Any) -> None:
    """Cooperative: polls ctx.cancelled and returns once the time limit set it."""
    record("stops_when_cancelled", payload)
    while not ctx.cancelled:
        time.sleep(0.01)
    get_redis().hset(runs_key(), f"cancelled:{payload['n']}", ctx.attempt)


@task(time_limit=0.2)
def blocks_in_c(payload: Any) -> None:
    """Ignores its time limit inside a C call that cannot be interrupted."""
    record("blocks_in_c:start", payload)
    time.sleep(float(payload["seconds"]))
    record("blocks_in_c:end", payload)


@task(time_limit=0.2)
def spins_in_python(payload: Any) -> None:
    """Ignores its time limit in a pure-Python loop, which the watchdog can interrupt."""
    record("spins_in_python:start", payload)
    try:
        while True:
            pass
    finally:
        record("spins_in_python:interrupted", payload)


@task(expires=0.2)
def expiring(payload: Any) -> None:
    record("expiring", payload)


@task(reservation_timeout=4)
def patient(payload: Any) -> None:
    record("patient", payload)


@task(takes_context=True)
def beats_by_hand(ctx: Any, payload: Any) -> None:
    get_redis().hset(runs_key(), f"beat:{payload['n']}", int(ctx.heartbeat()))


from tests.testapp import chaos_tasks  # noqa: E402,F401 - registers the chaos suite's tasks
