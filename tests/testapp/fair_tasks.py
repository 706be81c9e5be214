"""Fixture tasks of the fair queue tests (imported by tasks.py): each records its start
in Redis under the test's prefix, so a test reads the order of starts across worker
threads and processes."""

from __future__ import annotations

from typing import Any

from django_taskrunner import get_redis, task
from django_taskrunner.conf import get_settings

FAIR_QUEUE = "fair"
FAIR_CHAOS_QUEUE = "fair-chaos"


def fair_starts_key() -> str:
    """List of the keys of the tasks started, in start order."""
    return f"{get_settings().PREFIX}:test:fair-starts"


def fair_runs_key() -> str:
    """Hash of payload["id"] -> how many times it ran."""
    return f"{get_settings().PREFIX}:test:fair-runs"


@task(queue=FAIR_QUEUE, fair_key=lambda payload: payload["k"],
      fair_weight={"A": 3, "default": 1})
def fair_step(payload: Any) -> None:
    get_redis().rpush(fair_starts_key(), payload["k"])


@task(queue=FAIR_CHAOS_QUEUE, fair_key=lambda payload: payload["k"], max_retry=3)
def fair_chaos_step(payload: Any) -> None:
    pipe = get_redis().pipeline(transaction=False)
    pipe.rpush(fair_starts_key(), payload["k"])
    pipe.hincrby(fair_runs_key(), str(payload["id"]), 1)
    pipe.execute()
