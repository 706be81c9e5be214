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
from django.core.exceptions import ImproperlyConfigured

from django_taskrunner.checks import check_connection_alias, validate_settings
from django_taskrunner.defaults import DEFAULTS

__all__ = ["Settings", "get_settings", "on_reset", "reset"]

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
