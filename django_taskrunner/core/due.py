"""Due times: a `delay` or a `when` turned into epoch milliseconds, checked strictly.

Kept apart from dispatch so the rules (types, time zones, DST) read in one place and
are unit-tested without Redis.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from django.utils import timezone

from django_taskrunner.exceptions import InvalidTaskOptions

# Scores are doubles: past 2**53 ms (year ~287,000) they stop being exact integers.
MAX_DUE_MS = 2**53


def delay_seconds(delay: Any) -> float:
    """`delay` (seconds or a timedelta) as a float; refuses other types and NaN/infinity."""
    if isinstance(delay, timedelta):
        return delay.total_seconds()
    if isinstance(delay, bool) or not isinstance(delay, int | float):
        raise TypeError(
            f"delay must be a number of seconds or a datetime.timedelta, "
            f"not {type(delay).__name__}"
        )
    if not math.isfinite(delay):
        raise InvalidTaskOptions(f"delay must be a finite number of seconds, not {delay!r}")
    return float(delay)


def due_from_delay(delay: Any, now_ms: int) -> int:
    """Epoch ms at which a task delayed by `delay` from `now_ms` becomes due."""
    due = now_ms + round(delay_seconds(delay) * 1000)
    return _bounded(due, f"delay {delay!r}")


def due_from_when(when: Any) -> int:
    """Epoch ms of `when`; a naive datetime is read in Django's current time zone.

    Raises:
        TypeError: `when` is not a datetime.
        InvalidTaskOptions: a naive `when` is ambiguous or does not exist in that zone
            (a daylight-saving change), so its instant cannot be known.
    """
    if not isinstance(when, datetime):
        raise TypeError(f"when must be a datetime.datetime, not {type(when).__name__}")
    if timezone.is_naive(when):
        when = make_aware_strict(when, timezone.get_current_timezone())
    return _bounded(math.floor(when.timestamp() * 1000), f"when {when.isoformat()}")


def make_aware_strict(naive: datetime, zone: tzinfo) -> datetime:
    """`naive` as an aware datetime in `zone`; refuse a wall time DST makes unclear."""
    early, late = naive.replace(tzinfo=zone, fold=0), naive.replace(tzinfo=zone, fold=1)
    if early.utcoffset() == late.utcoffset():
        return early
    # A wall time that does not survive a round trip through UTC was skipped (spring
    # forward); one that does, with two offsets, happens twice (fall back).
    back = early.astimezone(UTC).astimezone(zone).replace(tzinfo=None)
    problem = "does not exist" if back != naive else "is ambiguous"
    raise InvalidTaskOptions(
        f"naive datetime {naive.isoformat()} {problem} in time zone {zone} (a daylight-saving "
        f"change); pass an aware datetime instead"
    )


def _bounded(due_ms: int, what: str) -> int:
    if not -MAX_DUE_MS < due_ms < MAX_DUE_MS:
        raise InvalidTaskOptions(f"{what} is too far from now to schedule")
    return due_ms
