"""Tasks for the chaos suite. They count their runs in a *separate* Redis (the
`TASKRUNNER_CHAOS_COUNTER_URL`), so stopping the broker's Redis does not blind the count.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import redis

from django_taskrunner import get_redis, task
from django_taskrunner.conf import get_settings

_lock = threading.Lock()
_counter: list[Any] = []


def counter() -> Any:
    """One client per process, made once even when many threads ask at the same time
    (a second client would close its connections when garbage-collected, mid-command)."""
    with _lock:
        if not _counter:
            url = os.environ.get("TASKRUNNER_CHAOS_COUNTER_URL")
            _counter.append(redis.Redis.from_url(url) if url else get_redis())
        return _counter[0]


def chaos_key(kind: str) -> str:
    return f"{get_settings().PREFIX}:chaos:{kind}"


@task
def chaos_work(payload: dict[str, Any]) -> None:
    """Counts its start (and which process), sleeps `sleep` seconds, counts its run."""
    n, pid = payload["n"], os.getpid()
    record(("starts", "started_by"), n, pid)
    if payload.get("sleep"):
        time.sleep(payload["sleep"])
    record(("runs", "done_by"), n, pid)


def record(kinds: tuple[str, str], n: Any, pid: int) -> None:
    count, by = kinds
    pipe = counter().pipeline(transaction=False)
    pipe.hincrby(chaos_key(count), n, 1)
    pipe.hset(chaos_key(by), n, pid)
    pipe.hincrby(chaos_key(f"{count}_per_pid"), pid, 1)
    pipe.execute()


@task(max_retry=1)
def chaos_poison(payload: dict[str, Any]) -> None:
    """Counts its run, then kills the worker process running it."""
    counter().hincrby(chaos_key("runs"), payload["n"], 1)
    os.kill(os.getpid(), signal.SIGKILL)


def _leased(timeout: int) -> Any:
    """A task on queue "leases" with its own `reservation_timeout`; it never calls
    `ctx.heartbeat()`, so only the worker's heartbeat keeps it reserved."""

    def leased(payload: dict[str, Any]) -> None:
        chaos_work.fn(payload)

    leased.__name__ = f"chaos_leased_{timeout}"
    return task(name=f"chaos_leased_{timeout}", queue="leases", reservation_timeout=timeout)(
        leased)


# reservation timeouts of 1 to 5 seconds (tests/chaos/test_long_tasks.py)
LEASED = {timeout: _leased(timeout) for timeout in range(1, 6)}
