"""The `TASKRUNNER` setting: its keys and defaults, the bounds the package accepts, the
check of every value, and the reading of it (lazy, cached, reset on change).

One module for the one setting: `DEFAULTS` lists each key with its default and the line
documenting it; `KEY_CHECKS` holds one check per key (a test keeps the two in step);
`validate_settings()` is what both `get_settings()` and the system check
(`checks.py`) run, so a bad value fails the same way at start-up (`manage.py check`,
`runserver`, `runtasks`) and at first use in a process that runs no checks (gunicorn, a
script calling `django.setup()`). The bounds of names and numbers (`QUEUE_NAME`,
`MAX_SECONDS`...) apply wherever a value comes from: a setting, a task option, a
`runtasks` argument, an admin form or a dispatch.

Nothing is read at import time, so `override_settings(TASKRUNNER=...)` works; a
`setting_changed` receiver (in `apps.py`) calls `reset()`.
"""

from __future__ import annotations

import difflib
import functools
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error
from django.core.exceptions import ImproperlyConfigured

__all__ = ["Settings", "get_settings", "on_reset", "reset"]

QUEUE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,99}$")
# A year. A longer time setting is a mistake, and far longer ones overflow what Redis
# (milliseconds in a signed 64-bit integer) and thread timeouts accept.
MAX_SECONDS = 365 * 24 * 3600
PREFETCH_MS_MAX = 60_000  # a read grown to a minute of work is no longer a prefetch
# Thread pools and reads larger than these are typing mistakes, not configurations.
MAX_POOL = 1024
MAX_BATCH = 10_000
MAX_PROCESSES = 1024  # worker processes of one `runtasks`
MAX_TASKS_PER_CHILD = 1_000_000_000
MAX_MEMORY_MB = 1024 * 1024  # a terabyte: anything more is a typing mistake

@dataclass(frozen=True)
class Option:
    """One key of `TASKRUNNER`: its default and the line that documents it."""

    default: Any
    doc: str


DEFAULTS: dict[str, Option] = {
    "REDIS_URL": Option(None, "URL of the Redis server (redis://, rediss:// or unix://)."),
    "CONNECTION": Option(None, "Alias of a django-redis cache whose client to use instead."),
    "CLUSTER_NODES": Option(None, 'Startup nodes ["host:port", ...] of a Redis Cluster.'),
    "SHARDS": Option(
        1, "Streams each queue is split into: a number for every queue, or {queue: number}."
    ),
    "EMBEDDED_DIR": Option(
        None, "Data folder of the embedded Redis (default: BASE_DIR/.taskrunner)."
    ),
    "PREFIX": Option("taskrunner", "First part of every Redis key the app writes."),
    "CONSUMER_GROUP": Option("taskrunner", "Consumer group shared by every worker."),
    "DEFAULT_QUEUE": Option("default", "Queue of tasks that name none."),
    "RESERVATION_TIMEOUT": Option(
        300, "Seconds a message may stay un-acked without heartbeat before it is reclaimed."
    ),
    "BATCH_SIZE": Option(10, "Messages read from a stream in one XREADGROUP."),
    "PREFETCH_MS": Option(
        20, "Milliseconds of short tasks a read may grow to hold, up to 100 (0: BATCH_SIZE)."
    ),
    "BLOCK_MS": Option(1000, "Milliseconds an idle XREADGROUP blocks before it is repeated."),
    "MIN_WORKERS": Option(None, "Smallest autoscaled pool (None: a fixed pool of MAX_WORKERS)."),
    "MAX_WORKERS": Option(8, "Worker threads of a fixed pool, or the largest autoscaled one."),
    "DESIRED_WAIT": Option(1.0, "Seconds a task should wait in the queue; the autoscaler's goal."),
    "DESIRED_WAIT_TOLERANCE": Option(
        None, "Seconds around DESIRED_WAIT in which the pool keeps its size (None: half of it)."
    ),
    "TUNING_COOLDOWN": Option(
        10, "Seconds an autoscaled pool waits after a change before the next one."
    ),
    "STATS_INTERVAL": Option(
        1.0, "Seconds between a worker's writes of its statistics and heartbeat."
    ),
    "STATS_WINDOW": Option(200, "Recent run times kept per task and queue (averages, p95)."),
    "SHUTDOWN_TIMEOUT": Option(30, "Seconds running tasks get to finish on SIGTERM/SIGINT."),
    "ASYNC_CONCURRENCY": Option(
        100, "async def tasks a worker process awaits side by side on its event loop."
    ),
    "EAGER": Option(False, "Run dispatched tasks at once in the calling process (for tests)."),
    "DELETE_ON_ACK": Option(True, "Delete a message from its stream (XDEL) when it is acked."),
    "FAILED_TASK_HANDLER": Option(
        None, "Dotted path of a callable(task_message, exception) run for each failed task."
    ),
    "LONG_QUEUE_HOOK": Option(
        None, "Dotted path of a callable(stats) run when the predicted wait is too long."
    ),
    "LONG_QUEUE_THRESHOLD": Option(60, "Predicted wait, in seconds, that calls LONG_QUEUE_HOOK."),
    "LONG_QUEUE_COOLDOWN": Option(
        300, "Seconds after LONG_QUEUE_HOOK fired for a queue before it may fire again."
    ),
    "METRICS_TOKEN": Option(
        None, "Bearer token that may read the Prometheus metrics view (staff users always may)."
    ),
    "SOCKET_TIMEOUT": Option(10, "Seconds a Redis command may take before it fails."),
    "CONNECT_TIMEOUT": Option(5, "Seconds to connect to Redis before giving up."),
    "LEADER_LEASE": Option(
        10, "Seconds of the scheduler leader's lease: a dead leader is replaced within this."
    ),
    "TIME_LIMIT_GRACE": Option(
        5, "Seconds a task past its time_limit may take to stop before its thread is replaced."
    ),
    "PROCESSES": Option(
        1, "Worker processes `runtasks` runs, each with its own thread pool; an integer or "
        '"auto" (the CPU count). 1: one process, no supervisor (unless a child limit is set).',
    ),
    "MAX_TASKS_PER_CHILD": Option(
        None, "Tasks a worker process runs before it is replaced by a fresh one (None: no limit)."
    ),
    "MAX_MEMORY_PER_CHILD": Option(
        None, "Megabytes of resident memory past which a worker process is replaced, checked "
        "between tasks (None: no limit).",
    ),
    "WORKER_LOST_AFTER": Option(
        15, "Seconds without a heartbeat after which a worker is declared lost and its "
        "messages are handed to the others at once.",
    ),
    "RESULT_TTL": Option(
        86400, "Seconds a finished task's record (status, result, error) is kept; 0: none."
    ),
    "FINISHED_LIST_SIZE": Option(
        10_000, "Finished tasks listed per queue on the admin's Tasks page (the newest are "
        "kept, for as long as their records); 0: no list.",
    ),
    "QUEUE_FORGET_AFTER": Option(
        86400, "Seconds a known queue may go unseen, empty, before the leader forgets it; "
        "0: never.",
    ),
    "DEAD_CONSUMER_TIMEOUT": Option(
        None, "Seconds a consumer with nothing pending may stay idle before it is removed from "
        "the group (None: the larger of 1 hour and 10 x RESERVATION_TIMEOUT).",
    ),
    "OUTBOX": Option(
        True, "Dispatches on commit (dispatch_on_commit, dispatch_on) go through the "
        "transactional outbox: written in the caller's transaction, never lost after it commits.",
    ),
    "OUTBOX_WARN_AGE": Option(
        300, "Seconds an outbox row may wait before `check --database` warns (taskrunner.W030)."
    ),
}

def parse_node(node: str) -> tuple[str, int]:
    """`"host:port"` (or `"[v6 address]:port"`) -> (host, port); ValueError if malformed."""
    host, sep, port = node.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f'a cluster node must be "host:port", not {node!r}')
    return host, int(port)

PREFIX_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$")
# A queue split into more streams than this is a configuration mistake: every worker
# runs one reader thread per shard.
MAX_SHARDS = 256
MAX_FINISHED_LIST = 1_000_000  # ids per queue's finished index (about 60 MB of Redis)
MAX_ASYNC = 10_000
MAX_WINDOW = 100_000


def error(msg: str, id_: str, hint: str | None = None) -> Error:
    """A TASKRUNNER system-check error (also used by checks.py)."""
    return Error(msg, hint=hint, obj="settings.TASKRUNNER", id=id_)


def _is_number(value: Any) -> bool:
    """An int or a finite float (not a bool): NaN and infinity are no usable number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) or math.isfinite(value)


def _check_unknown(raw: dict[str, Any]) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for key in raw:
        if key in DEFAULTS:
            continue
        close = difflib.get_close_matches(str(key), DEFAULTS, n=1)
        hint = f'did you mean "{close[0]}"?' if close else "see docs/settings.md for the keys"
        errors.append(error(f'unknown key "{key}" in TASKRUNNER', "taskrunner.E001", hint))
    return errors


def _figure(value: float) -> str:
    """31536000 as "31,536,000", 0.05 as "0.05": as docs/settings.md writes them."""
    return f"{int(value):,}" if value == int(value) else f"{value:g}"


@dataclass(frozen=True)
class NumberRule:
    """The type and inclusive range of a numeric key (`taskrunner.E002` when broken)."""

    integer: bool
    minimum: float
    maximum: float
    none_allowed: bool = False  # None means "computed from other settings"

    def describe(self) -> str:
        what = "an integer" if self.integer else "a finite number"
        either = "None or " if self.none_allowed else ""
        return f"{either}{what} from {_figure(self.minimum)} to {_figure(self.maximum)}"

    def accepts(self, value: Any) -> bool:
        if value is None:
            return self.none_allowed
        if self.integer and (isinstance(value, bool) or not isinstance(value, int)):
            return False
        return _is_number(value) and self.minimum <= value <= self.maximum


NUMBERS: dict[str, NumberRule] = {
    "RESERVATION_TIMEOUT": NumberRule(False, 1, MAX_SECONDS),
    "BATCH_SIZE": NumberRule(True, 1, MAX_BATCH),
    "PREFETCH_MS": NumberRule(True, 0, PREFETCH_MS_MAX),
    "BLOCK_MS": NumberRule(True, 1, MAX_SECONDS * 1000),  # and below SOCKET_TIMEOUT: E009
    "MIN_WORKERS": NumberRule(True, 1, MAX_POOL, none_allowed=True),
    "MAX_WORKERS": NumberRule(True, 1, MAX_POOL),
    "DESIRED_WAIT": NumberRule(False, 0.001, MAX_SECONDS),
    "DESIRED_WAIT_TOLERANCE": NumberRule(False, 0, MAX_SECONDS, none_allowed=True),
    "TUNING_COOLDOWN": NumberRule(False, 0, MAX_SECONDS),
    "STATS_INTERVAL": NumberRule(False, 0.05, MAX_SECONDS),
    "STATS_WINDOW": NumberRule(True, 1, MAX_WINDOW),
    "SHUTDOWN_TIMEOUT": NumberRule(False, 0, MAX_SECONDS),
    "ASYNC_CONCURRENCY": NumberRule(True, 1, MAX_ASYNC),
    "LONG_QUEUE_THRESHOLD": NumberRule(False, 0, MAX_SECONDS),
    "LONG_QUEUE_COOLDOWN": NumberRule(False, 0.001, MAX_SECONDS),
    "SOCKET_TIMEOUT": NumberRule(False, 0.001, MAX_SECONDS),
    "CONNECT_TIMEOUT": NumberRule(False, 0.001, MAX_SECONDS),
    "LEADER_LEASE": NumberRule(False, 1, MAX_SECONDS),
    "TIME_LIMIT_GRACE": NumberRule(False, 0, MAX_SECONDS),
    "DEAD_CONSUMER_TIMEOUT": NumberRule(False, 1, MAX_SECONDS, none_allowed=True),
    "RESULT_TTL": NumberRule(True, 0, MAX_SECONDS),
    "FINISHED_LIST_SIZE": NumberRule(True, 0, MAX_FINISHED_LIST),
    "QUEUE_FORGET_AFTER": NumberRule(False, 0, MAX_SECONDS),  # 0: never
    "OUTBOX_WARN_AGE": NumberRule(False, 1, MAX_SECONDS),
    "MAX_TASKS_PER_CHILD": NumberRule(True, 1, MAX_TASKS_PER_CHILD, none_allowed=True),
    "MAX_MEMORY_PER_CHILD": NumberRule(True, 1, MAX_MEMORY_MB, none_allowed=True),
    "WORKER_LOST_AFTER": NumberRule(False, 1, MAX_SECONDS),
}


def _check_processes(value: Any) -> list[CheckMessage]:
    """PROCESSES: an integer from 1 to MAX_PROCESSES, or "auto"."""
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool)
                           and 1 <= value <= MAX_PROCESSES):
        return []
    return [error(f"TASKRUNNER['PROCESSES'] must be \"auto\" or an integer from 1 to "
                  f"{MAX_PROCESSES}, not {value!r}", "taskrunner.E002")]


def _number_check(key: str) -> Callable[[Any], list[CheckMessage]]:
    rule = NUMBERS[key]

    def check(value: Any) -> list[CheckMessage]:
        if rule.accepts(value):
            return []
        return [error(f"TASKRUNNER[{key!r}] must be {rule.describe()}, not {value!r}",
                       "taskrunner.E002")]

    return check


def _name_check(key: str, pattern: re.Pattern[str]) -> Callable[[Any], list[CheckMessage]]:
    def check(value: Any) -> list[CheckMessage]:
        if isinstance(value, str) and pattern.match(value):
            return []
        return [error(f"TASKRUNNER[{key!r}] must be a name of letters, digits, '.', '_' or "
                       f"'-' (no ':', '{{' or '}}'), not {value!r}", "taskrunner.E004")]

    return check


def _optional_string_check(key: str) -> Callable[[Any], list[CheckMessage]]:
    def check(value: Any) -> list[CheckMessage]:
        if value is None or isinstance(value, str):
            return []
        return [error(f"TASKRUNNER[{key!r}] must be a string or None, not {value!r}",
                       "taskrunner.E005")]

    return check


def _check_redis_url(url: Any) -> list[CheckMessage]:
    if url is not None and not (isinstance(url, str)
                                and url.startswith(("redis://", "rediss://", "unix://"))):
        return [error(f"TASKRUNNER['REDIS_URL'] must be None or a URL starting with "
                       f"redis://, rediss:// or unix://, not {url!r}", "taskrunner.E005")]
    return []


def _check_metrics_token(token: Any) -> list[CheckMessage]:
    if token is not None and not isinstance(token, str):
        return [error(f"TASKRUNNER['METRICS_TOKEN'] must be a string or None, not "
                       f"{type(token).__name__}", "taskrunner.E005")]
    if isinstance(token, str) and len(token) < 16:
        return [error("TASKRUNNER['METRICS_TOKEN'] must be at least 16 characters long",
                       "taskrunner.E005", hint="e.g. python -c 'import secrets; "
                       "print(secrets.token_urlsafe())'")]
    return []


def _bool_check(key: str) -> Callable[[Any], list[CheckMessage]]:
    def check(value: Any) -> list[CheckMessage]:
        if isinstance(value, bool):
            return []
        return [error(f"TASKRUNNER[{key!r}] must be True or False, not {value!r}",
                      "taskrunner.E005")]

    return check


def _check_embedded_dir(value: Any) -> list[CheckMessage]:
    """None, or a folder path: a non-empty str or os.PathLike naming a str path."""
    path = None
    if isinstance(value, str | os.PathLike):
        try:
            path = os.fspath(value)
        except TypeError:
            path = None
    if value is None or (isinstance(path, str) and path and "\0" not in path):
        return []
    return [error(f"TASKRUNNER['EMBEDDED_DIR'] must be None or a folder path (a non-empty "
                   f"str or pathlib.Path), not {value!r}", "taskrunner.E005")]


def _check_cluster_nodes(nodes: Any) -> list[CheckMessage]:
    """None, or a non-empty list of "host:port" strings."""
    if nodes is None:
        return []
    message = "TASKRUNNER['CLUSTER_NODES'] must be None or a non-empty list of \"host:port\""
    if not isinstance(nodes, list | tuple) or not nodes:
        return [error(f"{message}, not {nodes!r}", "taskrunner.E005")]
    errors: list[CheckMessage] = []
    for node in nodes:
        try:
            parse_node(node)
        except (TypeError, ValueError, AttributeError):
            errors.append(error(f"{message}; {node!r} is not one", "taskrunner.E005"))
    return errors


def _check_shards(value: Any) -> list[CheckMessage]:
    """SHARDS: a count for every queue, or {queue name: count}; counts 1..MAX_SHARDS."""
    counts = value if isinstance(value, dict) else {"*": value}
    errors: list[CheckMessage] = []
    for queue, count in counts.items():
        if queue != "*" and not (isinstance(queue, str) and QUEUE_NAME.match(queue)):
            errors.append(error(f"TASKRUNNER['SHARDS'] names {queue!r}, which is not a "
                                 f"queue name", "taskrunner.E011"))
        if isinstance(count, bool) or not isinstance(count, int) or not (
                1 <= count <= MAX_SHARDS):
            errors.append(error(f"TASKRUNNER['SHARDS'] must be a number of shards from 1 to "
                                 f"{MAX_SHARDS}, or a dict of queue name -> that number; "
                                 f"not {count!r}", "taskrunner.E011"))
    return errors


# One check of type and range per key of conf.DEFAULTS, run only when the key is given
# (the defaults pass them all). Checks across keys are in _check_combinations.
KEY_CHECKS: dict[str, Callable[[Any], list[CheckMessage]]] = {
    **{key: _number_check(key) for key in NUMBERS},
    "REDIS_URL": _check_redis_url,
    "CONNECTION": _optional_string_check("CONNECTION"),
    "CLUSTER_NODES": _check_cluster_nodes,
    "SHARDS": _check_shards,
    "EMBEDDED_DIR": _check_embedded_dir,
    "PREFIX": _name_check("PREFIX", PREFIX_NAME),
    "CONSUMER_GROUP": _name_check("CONSUMER_GROUP", PREFIX_NAME),
    "DEFAULT_QUEUE": _name_check("DEFAULT_QUEUE", QUEUE_NAME),
    "DELETE_ON_ACK": _bool_check("DELETE_ON_ACK"),
    "EAGER": _bool_check("EAGER"),
    "FAILED_TASK_HANDLER": _optional_string_check("FAILED_TASK_HANDLER"),
    "LONG_QUEUE_HOOK": _optional_string_check("LONG_QUEUE_HOOK"),
    "METRICS_TOKEN": _check_metrics_token,
    "OUTBOX": _bool_check("OUTBOX"),
    "PROCESSES": _check_processes,
}


def _check_keys(raw: dict[str, Any]) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for key, check in KEY_CHECKS.items():
        if key in raw:
            errors += check(raw[key])
    return errors


def _valid(raw: dict[str, Any], key: str, default: Any) -> Any:
    """raw[key] when it passed its own check, else None (its error is already reported)."""
    value = raw.get(key, default)
    return value if not KEY_CHECKS[key](value) else None


def _check_combinations(raw: dict[str, Any]) -> list[CheckMessage]:
    """Values each fine alone but not together (only between values that are fine alone)."""
    errors: list[CheckMessage] = []
    smallest, largest = _valid(raw, "MIN_WORKERS", None), _valid(raw, "MAX_WORKERS", 8)
    if smallest is not None and largest is not None and smallest > largest:
        errors.append(
            error("TASKRUNNER['MIN_WORKERS'] is larger than MAX_WORKERS", "taskrunner.E003"))
    tolerance, desired = (_valid(raw, "DESIRED_WAIT_TOLERANCE", None),
                          _valid(raw, "DESIRED_WAIT", 1.0))
    if tolerance is not None and desired is not None and tolerance >= desired:
        errors.append(error(f"TASKRUNNER['DESIRED_WAIT_TOLERANCE'] ({tolerance:g} s) must be "
                             f"smaller than DESIRED_WAIT ({desired:g} s), or an autoscaled "
                             f"pool never shrinks", "taskrunner.E003"))
    block_ms, socket_timeout = _valid(raw, "BLOCK_MS", 1000), _valid(raw, "SOCKET_TIMEOUT", 10)
    if block_ms is not None and socket_timeout is not None and (
            block_ms / 1000 >= socket_timeout):
        errors.append(error(f"TASKRUNNER['BLOCK_MS'] ({block_ms} ms) must be shorter than "
                             f"SOCKET_TIMEOUT ({socket_timeout} s), or every idle read times "
                             f"out", "taskrunner.E009"))
    chosen = [key for key in ("REDIS_URL", "CONNECTION", "CLUSTER_NODES") if raw.get(key)]
    if len(chosen) > 1:
        both = "both" if len(chosen) == 2 else "all of"
        errors.append(error(f"set only one of REDIS_URL, CONNECTION or CLUSTER_NODES, not "
                             f"{both} {' and '.join(chosen)}", "taskrunner.E006",
                             hint="a REDIS_URL may name any node of a cluster; its client "
                                  "then finds the others"))
    return errors


def validate_settings(raw: Any) -> list[CheckMessage]:
    """Every problem with a raw `TASKRUNNER` value; empty when it is usable.

    Needs nothing but the value itself (no CACHES, no imports of dotted paths).
    """
    if not isinstance(raw, dict):
        # The value itself is not shown: a URL given in place of the dict may hold a password.
        return [error(f"TASKRUNNER must be a dict, not {type(raw).__name__}", "taskrunner.E000",
                       hint='e.g. TASKRUNNER = {"REDIS_URL": "redis://localhost:6379/0"}')]
    return _check_unknown(raw) + _check_keys(raw) + _check_combinations(raw)


def check_connection_alias(raw: dict[str, Any]) -> list[CheckMessage]:
    """CONNECTION names a django-redis cache of CACHES (needs Django's settings)."""
    alias = raw.get("CONNECTION")
    if not isinstance(alias, str):
        return []
    caches = getattr(django_settings, "CACHES", {})
    if alias not in caches:
        return [error(f"TASKRUNNER['CONNECTION'] names cache {alias!r}, which is not in CACHES",
                       "taskrunner.E007")]
    backend = str(caches[alias].get("BACKEND", ""))
    if not backend.startswith("django_redis."):
        return [
            error(
                f"TASKRUNNER['CONNECTION'] names cache {alias!r}, whose backend {backend!r} "
                f"is not a django-redis cache",
                "taskrunner.E007",
                hint="use django_redis.cache.RedisCache, or set REDIS_URL instead",
            )
        ]
    return []


# The name tests and docs examples imported before the function became public.
_check_connection_alias = check_connection_alias


_reset_callbacks: list[Callable[[], None]] = []


@dataclass(frozen=True)
class Settings:
    """The merged and validated `TASKRUNNER` values (see `DEFAULTS` for each key)."""

    REDIS_URL: str | None
    CONNECTION: str | None
    CLUSTER_NODES: list[str] | None
    SHARDS: int | dict[str, int]
    EMBEDDED_DIR: Path
    PREFIX: str
    CONSUMER_GROUP: str
    DEFAULT_QUEUE: str
    RESERVATION_TIMEOUT: float
    BATCH_SIZE: int
    PREFETCH_MS: int
    BLOCK_MS: int
    MIN_WORKERS: int | None
    MAX_WORKERS: int
    DESIRED_WAIT: float
    DESIRED_WAIT_TOLERANCE: float | None
    TUNING_COOLDOWN: float
    STATS_INTERVAL: float
    STATS_WINDOW: int
    SHUTDOWN_TIMEOUT: float
    ASYNC_CONCURRENCY: int
    EAGER: bool
    DELETE_ON_ACK: bool
    FAILED_TASK_HANDLER: str | None
    LONG_QUEUE_HOOK: str | None
    LONG_QUEUE_THRESHOLD: float
    LONG_QUEUE_COOLDOWN: float
    METRICS_TOKEN: str | None
    SOCKET_TIMEOUT: float
    CONNECT_TIMEOUT: float
    LEADER_LEASE: float
    TIME_LIMIT_GRACE: float
    PROCESSES: int | str
    MAX_TASKS_PER_CHILD: int | None
    MAX_MEMORY_PER_CHILD: int | None
    WORKER_LOST_AFTER: float
    DEAD_CONSUMER_TIMEOUT: float | None
    RESULT_TTL: int
    FINISHED_LIST_SIZE: int
    QUEUE_FORGET_AFTER: float
    OUTBOX: bool
    OUTBOX_WARN_AGE: float


def raw_settings() -> Any:
    """`settings.TASKRUNNER` exactly as the project wrote it (`{}` when unset)."""
    return getattr(django_settings, "TASKRUNNER", {})


def user_settings() -> dict[str, Any]:
    """A copy of the `TASKRUNNER` dict (empty when unset, or when it is no dict: the
    system checks report that as taskrunner.E000, and `get_settings()` refuses it)."""
    value = raw_settings()
    return dict(value) if isinstance(value, dict) else {}


def default_embedded_dir() -> Path:
    base_dir = getattr(django_settings, "BASE_DIR", None)
    return Path(base_dir if base_dir is not None else Path.cwd()) / ".taskrunner"


@functools.cache
def get_settings() -> Settings:
    """Merge `TASKRUNNER` over `DEFAULTS`, refusing any bad value.

    The same checks as `manage.py check` (all but importing the dotted paths), because a
    process that runs no system checks (gunicorn, a script calling `django.setup()`)
    must fail loudly at first use rather than run on defaults it was not given.

    Raises:
        ImproperlyConfigured: `TASKRUNNER` is not a dict, or a value in it is bad; the
            message names each bad key and its check id.
    """
    raw = raw_settings()
    errors = validate_settings(raw)
    if not errors:
        errors = check_connection_alias(raw)
    if errors:
        raise ImproperlyConfigured(
            "bad TASKRUNNER setting: " + "; ".join(f"{error.msg} ({error.id})" for error in errors)
        )
    values = {key: raw.get(key, option.default) for key, option in DEFAULTS.items()}
    if values["EMBEDDED_DIR"] is None:
        values["EMBEDDED_DIR"] = default_embedded_dir()
    values["EMBEDDED_DIR"] = Path(values["EMBEDDED_DIR"])
    return Settings(**values)


def on_reset(callback: Callable[[], None]) -> Callable[[], None]:
    """Register `callback` to run on `reset()`: a module caching what it built from the
    settings (the Redis client, the broker) subscribes, so this module knows no users."""
    _reset_callbacks.append(callback)
    return callback


def reset() -> None:
    """Forget the cached settings and connections (after `override_settings`)."""
    get_settings.cache_clear()
    for callback in reversed(_reset_callbacks):  # the last built (the broker) first
        callback()
