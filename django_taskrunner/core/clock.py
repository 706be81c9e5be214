"""The one place the app reads the time, so tests can drive it."""

from __future__ import annotations

import time


def now_ms() -> int:
    """Wall-clock time in epoch milliseconds (what message and delayed-set times use)."""
    return time.time_ns() // 1_000_000


def monotonic() -> float:
    """Seconds from an arbitrary start, for measuring durations and timeouts."""
    return time.monotonic()
