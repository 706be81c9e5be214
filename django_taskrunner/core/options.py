"""Task options and the checks they share: what `@task(...)` accepts, rate and
concurrency limits included (`"N/s"` parsing and the limit's key, below).

The checks live apart from `Task` because dispatch (per-call overrides) and the
unique locks (modes, lock TTL) use them too, and `Task` itself uses dispatch.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django_taskrunner.conf import MAX_SECONDS, QUEUE_NAME
from django_taskrunner.exceptions import InvalidTaskOptions, TaskRunnerError, UniqueForRequired

UNIQUE_MODES = ("until_finished", "until_executed", "until_executing", "while_locked",
                "debounce")
UNIQUE_FOR_MAX = 7 * 24 * 3600
# What a unique dispatch does when the lock is held (docs/unique.md, "on_conflict").
ON_CONFLICT = ("raise", "return", "replace")


@dataclass(frozen=True)
class TaskOptions:
    """Everything `@task(...)` accepts; see docs/tasks.md for each option."""

    queue: str | None = None  # None: TASKRUNNER["DEFAULT_QUEUE"], read at dispatch
    max_retry: int = 0
    retry_backoff: float | Callable[[int], float] | None = None  # None: default_backoff
    reservation_timeout: float | None = None
    time_limit: float | None = None
    expires: float | None = None
    cron: str | None = None
    schedule: float | None = None
    unique: bool = False
    unique_for: float | None = None
    unique_key: Callable[[Any], str] | None = None
    unique_mode: str = "until_finished"
    takes_context: bool = False
    result_ttl: int | None = None  # None: TASKRUNNER["RESULT_TTL"]; 0: no record
    rate_limit: str | None = None  # "N/s", "N/m" or "N/h" (core/options.py)
    rate_key: Callable[[Any], str] | None = None
    concurrency_limit: int | None = None
    concurrency_key: Callable[[Any], str] | None = None
    on_conflict: str = "raise"  # a unique dispatch meeting a held lock: ON_CONFLICT
    debounce: float | None = None  # seconds of quiet before a unique_mode="debounce" run
    priority: int | None = None  # 0..9, higher first within a queue; None: DEFAULT_PRIORITY
    fair_key: Callable[[Any], str] | None = None  # payload -> key served in turns (fair queues)
    fair_weight: Callable[[str], int] | Mapping[str, int] | None = None  # turns per key


def check_queue_name(queue: Any) -> str:
    """Return `queue` if it is a valid queue name, else raise `InvalidTaskOptions`."""
    if not isinstance(queue, str) or not QUEUE_NAME.match(queue):
        raise InvalidTaskOptions(
            f"queue name must be 1-100 letters, digits, '.', '_' or '-' (no ':', '{{', '}}'), "
            f"not {queue!r}"
        )
    return queue


def is_finite(value: Any) -> bool:
    """An int or a finite float, not a bool: NaN and infinity are no number of seconds."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) or math.isfinite(value)


def check_seconds(name: str, value: Any, *, allow_none: bool = True) -> None:
    """Refuse anything but a finite number of seconds > 0 and at most `MAX_SECONDS`.

    Past a year the value is a mistake, and far larger ones overflow Redis millisecond
    arguments and thread timeouts when the task runs, long after it was declared.
    """
    if value is None and allow_none:
        return
    if not is_finite(value) or not 0 < value <= MAX_SECONDS:
        raise InvalidTaskOptions(
            f"{name} must be a positive, finite number of seconds (at most {MAX_SECONDS:,}, "
            f"a year), not {value!r}"
        )


def check_unique_for(unique_for: Any, task_name: str) -> float:
    """The lock TTL, required for unique tasks and bounded to 1 s .. 7 days."""
    if unique_for is None:
        raise UniqueForRequired(
            f"task {task_name!r} is unique but has no unique_for: give the lock's TTL in seconds"
        )
    if isinstance(unique_for, timedelta):
        unique_for = unique_for.total_seconds()
    if isinstance(unique_for, bool) or not isinstance(unique_for, int | float):
        raise InvalidTaskOptions(f"unique_for must be a number of seconds, not {unique_for!r}")
    if not 1 <= unique_for <= UNIQUE_FOR_MAX:
        raise InvalidTaskOptions(
            f"unique_for of task {task_name!r} must lie between 1 second and 7 days, "
            f"not {unique_for!r}"
        )
    return float(unique_for)


def check_unique_mode(mode: Any) -> str:
    if mode not in UNIQUE_MODES:
        raise InvalidTaskOptions(
            f"unique_mode must be one of {', '.join(UNIQUE_MODES)}, not {mode!r}")
    return str(mode)


def check_on_conflict(value: Any, task_name: str) -> str:
    """`on_conflict` is one of `ON_CONFLICT`."""
    if not isinstance(value, str) or value not in ON_CONFLICT:
        raise InvalidTaskOptions(f"on_conflict of task {task_name!r} must be one of "
                                 f"{', '.join(ON_CONFLICT)}, not {value!r}")
    return value


def check_debounce(options: TaskOptions, task_name: str) -> None:
    """`debounce` goes with `unique_mode="debounce"` (and that mode needs it): a
    positive, finite number of seconds, at most `UNIQUE_FOR_MAX`."""
    value = options.debounce
    if value is None:
        if options.unique_mode == "debounce":
            raise InvalidTaskOptions(f"task {task_name!r} has unique_mode='debounce' but no "
                                     f"debounce: give the quiet period in seconds")
        return
    if options.unique_mode != "debounce":
        raise InvalidTaskOptions(f"debounce={value!r} of task {task_name!r} needs "
                                 f"unique_mode='debounce', not {options.unique_mode!r}")
    if not is_finite(value) or not 0 < value <= UNIQUE_FOR_MAX:
        raise InvalidTaskOptions(f"debounce of task {task_name!r} must be a positive number "
                                 f"of seconds (at most 7 days), not {value!r}")


# Priorities (docs/priorities.md): 0..9, higher first within a queue. A message without
# one (or with DEFAULT_PRIORITY) stays on the queue's own stream; the others go to one
# stream per level in the queue's slot (store/keys.py, `level_name`).
PRIORITIES = range(10)
DEFAULT_PRIORITY = 5


def check_priority(value: Any, task_name: str) -> int | None:
    """`priority` is None or an int 0..9 (not a bool)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value not in PRIORITIES:
        raise InvalidTaskOptions(f"priority of task {task_name!r} must be an integer from "
                                 f"0 to 9 (higher runs first), not {value!r}")
    return value


# Fair queues (docs/flow-control.md, "Fair queues"): a key is a non-empty string of at
# most FAIR_KEY_MAX characters; a weight an integer of turns, 1..FAIR_WEIGHT_MAX.
FAIR_KEY_MAX = 256
FAIR_WEIGHT_MAX = 1000
FAIR_WEIGHT_DEFAULT_KEY = "default"


def check_fair_key(value: Any, task_name: str) -> str | None:
    """A fair key given at dispatch (or returned by `fair_key`): None or a non-empty
    string of at most FAIR_KEY_MAX characters."""
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= FAIR_KEY_MAX:
        raise InvalidTaskOptions(f"fair_key of task {task_name!r} must be a non-empty string "
                                 f"of at most {FAIR_KEY_MAX} characters, not {value!r:.300}")
    return value


def check_fair_options(fair_key: Any, fair_weight: Any, task_name: str) -> None:
    """`@task(fair_key=..., fair_weight=...)`: a callable, and a callable or a mapping
    of int weights (its "default" entry for the keys it does not name)."""
    if fair_key is not None and not callable(fair_key):
        raise InvalidTaskOptions(f"fair_key of task {task_name!r} must be a callable(payload)"
                                 f" -> str, not {fair_key!r}")
    if fair_weight is None or callable(fair_weight):
        return
    if not isinstance(fair_weight, Mapping):
        raise InvalidTaskOptions(f"fair_weight of task {task_name!r} must be a callable(key)"
                                 f" -> int or a mapping of key -> int, not {fair_weight!r}")
    for weight in fair_weight.values():
        check_fair_weight(weight, task_name)


def check_fair_weight(weight: Any, task_name: str) -> int:
    """A number of turns: an int from 1 to FAIR_WEIGHT_MAX (not a bool)."""
    if isinstance(weight, bool) or not isinstance(weight, int) or not (
            1 <= weight <= FAIR_WEIGHT_MAX):
        raise InvalidTaskOptions(f"fair_weight of task {task_name!r} must give an integer "
                                 f"from 1 to {FAIR_WEIGHT_MAX}, not {weight!r}")
    return weight


def fair_weight_of(options: TaskOptions, key: str, task_name: str) -> int:
    """The turns `key` gets: from the task's `fair_weight` (callable, or mapping with a
    "default"), else 1."""
    source = options.fair_weight
    if source is None:
        return 1
    if callable(source):
        return check_fair_weight(source(key), task_name)
    return check_fair_weight(source.get(key, source.get(FAIR_WEIGHT_DEFAULT_KEY, 1)), task_name)


# Rate limits and concurrency limits: the options' checks, `"N/s"` parsing, and the key
# a message is limited under.
#
# What a limit means lives here (a parsed `Rate`, the key function's result checked);
# the Redis side is `store/limits.py`, the worker's side `worker/steps.py`.

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
