"""The `TASKRUNNER` setting: one table of defaults, read lazily, cached, reset on change.

Nothing is read at import time, so `override_settings(TASKRUNNER=...)` works; a
`setting_changed` receiver (in `apps.py`) calls `reset()`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings as django_settings

_reset_callbacks: list[Callable[[], None]] = []


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
    "DEAD_CONSUMER_TIMEOUT": Option(
        None, "Seconds a consumer with nothing pending may stay idle before it is removed from "
        "the group (None: the larger of 1 hour and 10 x RESERVATION_TIMEOUT).",
    ),
}


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
    BLOCK_MS: int
    MIN_WORKERS: int | None
    MAX_WORKERS: int
    DESIRED_WAIT: float
    DESIRED_WAIT_TOLERANCE: float | None
    TUNING_COOLDOWN: float
    STATS_INTERVAL: float
    STATS_WINDOW: int
    SHUTDOWN_TIMEOUT: float
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
    DEAD_CONSUMER_TIMEOUT: float | None


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
    from django.core.exceptions import ImproperlyConfigured

    from django_taskrunner.checks import _check_connection_alias, validate_settings

    raw = raw_settings()
    errors = validate_settings(raw)
    if not errors:
        errors = _check_connection_alias(raw)
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
