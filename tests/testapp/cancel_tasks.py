"""Tasks of the cancellation tests (tests/integration/test_cancel_exact.py): they note,
in this process, when each started and when it saw `ctx.cancelled`."""

from __future__ import annotations

import threading
import time
from typing import Any

from django_taskrunner import task

STARTED: dict[str, float] = {}  # message id -> time.perf_counter() when its body began
SEEN: dict[str, float] = {}  # message id -> time.perf_counter() when ctx.cancelled was True
ACTIVE: dict[str, int] = {}  # unique key -> runs of it going on now
OVERLAPS: list[str] = []  # unique keys that ran twice at once
_lock = threading.Lock()


def reset() -> None:
    with _lock:
        STARTED.clear()
        SEEN.clear()
        ACTIVE.clear()
        OVERLAPS.clear()


@task(takes_context=True, unique=True, unique_for=60, unique_key=lambda p: str(p["k"]))
def exact_unique(ctx: Any, payload: Any) -> None:
    """Notes its start and whether another run of its key is going on, runs briefly."""
    key = str(payload["k"])
    with _lock:
        STARTED[ctx.id] = time.perf_counter()
        ACTIVE[key] = ACTIVE.get(key, 0) + 1
        if ACTIVE[key] > 1:
            OVERLAPS.append(key)
    time.sleep(payload.get("s", 0.004))
    with _lock:
        ACTIVE[key] -= 1


@task(takes_context=True)
def waits_for_cancel(ctx: Any, payload: Any) -> None:
    """Runs until cancelled (at most 10 s), noting when it saw `ctx.cancelled`."""
    STARTED[ctx.id] = time.perf_counter()
    deadline = time.monotonic() + 10
    while not ctx.cancelled and time.monotonic() < deadline:
        time.sleep(0.0005)
    SEEN[ctx.id] = time.perf_counter()
