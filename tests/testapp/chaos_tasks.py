"""Tasks for the chaos suite. They count their runs in a *separate* Redis (the
`TASKRUNNER_CHAOS_COUNTER_URL`), so stopping the broker's Redis does not blind the count.
"""

from __future__ import annotations

import os
import signal
import time
from functools import cache
from typing import Any

import redis

from django_taskrunner import task
from django_taskrunner.conf import get_settings
from django_taskrunner.connection import get_redis


@cache
def counter() -> Any:
    url = os.environ.get("TASKRUNNER_CHAOS_COUNTER_URL")
    return redis.Redis.from_url(url) if url else get_redis()


def chaos_key(kind: str) -> str:
    return f"{get_settings().PREFIX}:chaos:{kind}"


@task
def chaos_work(payload: dict[str, Any]) -> None:
    """Marks its start (by pid), sleeps `sleep` seconds, then counts its run."""
    n, pid = payload["n"], os.getpid()
    counter().hset(chaos_key("started"), n, pid)
    if payload.get("sleep"):
        time.sleep(payload["sleep"])
    pipe = counter().pipeline(transaction=False)
    pipe.hincrby(chaos_key("runs"), n, 1)
    pipe.hset(chaos_key("done"), n, pid)
    pipe.execute()


@task(max_retry=1)
def chaos_poison(payload: dict[str, Any]) -> None:
    """Counts its run, then kills the worker process running it."""
    counter().hincrby(chaos_key("runs"), payload["n"], 1)
    os.kill(os.getpid(), signal.SIGKILL)
