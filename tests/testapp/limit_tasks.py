"""Fixture tasks of the rate and concurrency limit tests (imported by tasks.py).

Each records when it started (and ended) in Redis under the test's prefix, with the
wall clock, so a test can check windows and overlaps across worker threads and
processes.
"""

from __future__ import annotations

import json
import time
from typing import Any

from django_taskrunner import get_redis, task
from django_taskrunner.conf import get_settings

LIMITS_QUEUE = "limits"


def limit_runs_key() -> str:
    return f"{get_settings().PREFIX}:test:limit-runs"


def starts_key() -> str:
    return f"{get_settings().PREFIX}:test:limit-starts"


def spans_key() -> str:
    return f"{get_settings().PREFIX}:test:limit-spans"


@task(queue=LIMITS_QUEUE, rate_limit="5/s")
def five_a_second(payload: Any) -> None:
    """Records its start time (epoch seconds) and counts its runs per payload["n"]."""
    client = get_redis()
    client.rpush(starts_key(), repr(time.time()))
    client.hincrby(limit_runs_key(), f"five_a_second:{payload['n']}", 1)


@task(queue=LIMITS_QUEUE, rate_limit="2/s", rate_key=lambda payload: payload["account"])
def two_a_second_per_account(payload: Any) -> None:
    get_redis().hincrby(limit_runs_key(), f"per_account:{payload['account']}:{payload['n']}", 1)


@task(queue=LIMITS_QUEUE, concurrency_limit=1, concurrency_key=lambda payload: payload["k"])
def one_per_key(payload: Any) -> None:
    """Holds its key for `hold` seconds; records (key, start, end) and its run."""
    start = time.time()
    time.sleep(payload.get("hold", 0.15))
    client = get_redis()
    client.rpush(spans_key(), json.dumps([payload["k"], start, time.time()]))
    client.hincrby(limit_runs_key(), f"one_per_key:{payload['n']}", 1)


@task(queue=LIMITS_QUEUE, concurrency_limit=1, concurrency_key=lambda payload: 42)
def key_not_a_string(payload: Any) -> None:
    get_redis().hincrby(limit_runs_key(), "key_not_a_string", 1)


def _raises(payload: Any) -> str:
    raise KeyError("account")


@task(queue=LIMITS_QUEUE, rate_limit="10/s", rate_key=_raises)
def key_raises(payload: Any) -> None:
    get_redis().hincrby(limit_runs_key(), "key_raises", 1)


@task(queue="limits-crash", concurrency_limit=1, reservation_timeout=2)
def holds_its_slot(payload: Any) -> None:
    """The first run of payload["n"] blocks (until its worker is killed); later ones end."""
    client = get_redis()
    runs = client.hincrby(limit_runs_key(), f"holds_its_slot:{payload['n']}", 1)
    client.rpush(spans_key(), json.dumps([payload["n"], time.time()]))
    if payload.get("block") and runs == 1:
        time.sleep(60)


@task(queue=LIMITS_QUEUE, rate_limit="1/h")
def once_an_hour(payload: Any) -> None:
    get_redis().hincrby(limit_runs_key(), f"once_an_hour:{payload['n']}", 1)


@task(queue=LIMITS_QUEUE, concurrency_limit=1)
async def async_one_at_a_time(payload: Any) -> None:
    """An `async def` task under a concurrency limit: records (key, start, end)."""
    import asyncio

    start = time.time()
    await asyncio.sleep(0.1)
    get_redis().rpush(spans_key(), json.dumps(["async", start, time.time()]))
