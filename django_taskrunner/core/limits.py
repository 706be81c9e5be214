"""Rate limits and concurrency limits: the options' checks, `"N/s"` parsing, and the key
a message is limited under.

What a limit means lives here (a parsed `Rate`, the key function's result checked);
the Redis side is `store/limits.py`, the worker's side `worker/steps.py`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django_taskrunner.exceptions import InvalidTaskOptions, TaskRunnerError

RATE_UNITS = {"s": 1_000, "m": 60_000, "h": 3_600_000}
RATE_FORMAT = re.compile(r"^\s*([0-9]+)\s*/\s*([smh])\s*$")
# Past this many starts per window a log of start times grows too large to be precise
# cheaply; nobody limits a task to a million starts a second.
RATE_MAX = 1_000_000
CONCURRENCY_MAX = 100_000


class LimitKeyError(TaskRunnerError):
    """A `rate_key` or `concurrency_key` function raised, or returned no string."""


@dataclass(frozen=True)
class Rate:
    """`limit` starts at most in any window of `window_ms`."""

    limit: int
    window_ms: int


@functools.cache
def parse_rate(text: str) -> Rate:
    """`"100/m"` -> Rate(100, 60000); ValueError for anything else."""
    if not isinstance(text, str):
        raise ValueError(text)
    match = RATE_FORMAT.match(text)
    if match is None:
        raise ValueError(text)
    limit = int(match.group(1))
    if not 0 < limit <= RATE_MAX:
        raise ValueError(text)
    return Rate(limit, RATE_UNITS[match.group(2)])


def check_limit_options(
    task_name: str, rate_limit: Any, rate_key: Any, concurrency_limit: Any,
    concurrency_key: Any,
) -> None:
    """Raise `InvalidTaskOptions`, naming the task and the value, for a bad limit option."""
    if rate_limit is not None:
        try:
            parse_rate(rate_limit)
        except (ValueError, TypeError):
            raise InvalidTaskOptions(
                f"rate_limit of task {task_name!r} must be \"N/s\", \"N/m\" or \"N/h\" "
                f"with N from 1 to {RATE_MAX:,}, not {rate_limit!r}") from None
    if rate_key is not None:
        if rate_limit is None:
            raise InvalidTaskOptions(
                f"rate_key of task {task_name!r} needs a rate_limit (got rate_key="
                f"{rate_key!r} and no rate_limit)")
        if not callable(rate_key):
            raise InvalidTaskOptions(
                f"rate_key of task {task_name!r} must be a callable(payload) -> str, "
                f"not {rate_key!r}")
    if concurrency_limit is not None and (
            isinstance(concurrency_limit, bool) or not isinstance(concurrency_limit, int)
            or not 0 < concurrency_limit <= CONCURRENCY_MAX):
        raise InvalidTaskOptions(
            f"concurrency_limit of task {task_name!r} must be an integer from 1 to "
            f"{CONCURRENCY_MAX:,}, not {concurrency_limit!r}")
    if concurrency_key is not None:
        if concurrency_limit is None:
            raise InvalidTaskOptions(
                f"concurrency_key of task {task_name!r} needs a concurrency_limit (got "
                f"concurrency_key={concurrency_key!r} and no concurrency_limit)")
        if not callable(concurrency_key):
            raise InvalidTaskOptions(
                f"concurrency_key of task {task_name!r} must be a callable(payload) -> str, "
                f"not {concurrency_key!r}")


def limit_key_value(option: str, task_name: str, fn: Callable[[Any], Any] | None,
              payload: Any) -> str:
    """The key a run counts under: "" (one limit for the task) without a key function,
    else what `fn(payload)` returns. Raises `LimitKeyError` when it raises or returns
    anything but a string."""
    if fn is None:
        return ""
    try:
        key = fn(payload)
    except Exception as exc:
        raise LimitKeyError(
            f"{option} of task {task_name!r} raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(key, str):
        raise LimitKeyError(
            f"{option} of task {task_name!r} must return a str, returned {key!r}")
    return key
