"""Tasks for the `runtasks --processes` tests: they count their starts and runs in the
chaos suite's counter Redis (`chaos_tasks.record`), and some harm their own process."""

from __future__ import annotations

import ctypes
import os
import time
from typing import Any

from django_taskrunner import task
from tests.testapp.chaos_tasks import chaos_key, counter, record

_leaked: list[bytes] = []


@task(max_retry=5, retry_backoff=0)
def proc_work(payload: dict[str, Any]) -> None:
    """As chaos_work, with retries: a run cut short by a killed process runs again."""
    n, pid = payload["n"], os.getpid()
    record(("starts", "started_by"), n, pid)
    if payload.get("sleep"):
        time.sleep(payload["sleep"])
    record(("runs", "done_by"), n, pid)


@task(max_retry=2, retry_backoff=0)
def proc_segfault(payload: dict[str, Any]) -> None:
    """Counts its start, works a little, then crashes its process (a read at address 0).

    The little work lets the acks of the tasks before it go out (they wait up to 10 ms
    to share a round trip): a task that finished just before its process died, ack
    unsent, runs again, as at-least-once delivery allows."""
    counter().hincrby(chaos_key("starts"), payload["n"], 1)
    time.sleep(0.2)
    ctypes.string_at(0)


@task(max_retry=3, retry_backoff=0)
def proc_leak(payload: dict[str, Any]) -> None:
    """Leaks 5 MB a call, and records the largest resident size its process reached."""
    _leaked.append(os.urandom(1024) * (5 * 1024))
    with open("/proc/self/statm", "rb") as statm:
        resident = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    pipe = counter().pipeline(transaction=False)
    pipe.hincrby(chaos_key("runs"), payload["n"], 1)
    pipe.zadd(chaos_key("resident"), {str(os.getpid()): resident}, gt=True)
    pipe.execute()


@task(time_limit=1, max_retry=0)
def proc_stuck(payload: dict[str, Any]) -> None:
    """Blocks in C past its time limit: only ending its process stops it."""
    counter().hincrby(chaos_key("starts"), payload["n"], 1)
    time.sleep(600)


@task(max_retry=3, retry_backoff=0)
def proc_blocks(payload: dict[str, Any]) -> None:
    """Blocks in C for long and never reads ctx.cancelled: only ending its process stops
    it (cancel(id, terminate=True) in a child). Retries left: a cancel must not retry it."""
    n, pid = payload["n"], os.getpid()
    record(("starts", "started_by"), n, pid)
    time.sleep(600)
    record(("runs", "done_by"), n, pid)
