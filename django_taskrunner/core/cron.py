"""Occurrence times of a periodic schedule: a cron expression or a fixed interval.

Cron expressions are parsed by `cronsim` (5 fields, or 6 with seconds last) and read
in a given time zone, so "0 3 * * *" means 03:00 on the site's clock, across DST
changes. Intervals are counted from the Unix epoch, so every process agrees on their
occurrence times without sharing any state. All times are epoch milliseconds.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from cronsim import CronSim, CronSimError

from django_taskrunner.exceptions import InvalidTaskOptions


def check_cron(expression: Any) -> str:
    """Return `expression` if it is a valid cron expression, else `InvalidTaskOptions`."""
    if not isinstance(expression, str) or not expression.strip():
        raise InvalidTaskOptions(f"cron must be a cron expression string, not {expression!r}")
    try:
        CronSim(expression, datetime.now(UTC))
    except CronSimError as exc:
        raise InvalidTaskOptions(f"bad cron expression {expression!r}: {exc}") from None
    return expression


def _to_datetime(ms: int, zone: tzinfo) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).astimezone(zone)


def _to_ms(when: datetime) -> int:
    return round(when.timestamp() * 1000)


def cron_next_after(expression: str, after_ms: int, zone: tzinfo) -> int:
    """The first occurrence strictly after `after_ms`."""
    return _to_ms(next(CronSim(expression, _to_datetime(after_ms, zone))))


def cron_latest_at_or_before(expression: str, at_ms: int, zone: tzinfo) -> int | None:
    """The last occurrence at or before `at_ms` (None if there is none)."""
    # cronsim's reverse iteration starts strictly before its start time; one microsecond
    # later makes an occurrence exactly at `at_ms` count.
    start = _to_datetime(at_ms, zone) + timedelta(microseconds=1)
    try:
        return _to_ms(next(CronSim(expression, start, reverse=True)))
    except StopIteration:
        return None


def interval_next_after(interval_ms: int, after_ms: int) -> int:
    """The first multiple of `interval_ms` strictly after `after_ms`."""
    return (after_ms // interval_ms + 1) * interval_ms


def interval_latest_at_or_before(interval_ms: int, at_ms: int) -> int:
    """The last multiple of `interval_ms` at or before `at_ms`."""
    return (at_ms // interval_ms) * interval_ms
