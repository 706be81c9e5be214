"""System checks for the `TASKRUNNER` setting (ids `taskrunner.E001`...).

`validate_settings()` is also what `conf.get_settings()` runs, so a bad value fails
the same way at start-up (`manage.py check`, `runserver`, `runtasks`) and at first use.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from django.core.checks import CheckMessage, Error, Tags, register

QUEUE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,99}$")
PREFIX_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$")
# A queue split into more streams than this is a configuration mistake: every worker
# runs one reader thread per shard.
MAX_SHARDS = 256


def _error(msg: str, id_: str, hint: str | None = None) -> Error:
    return Error(msg, hint=hint, obj="settings.TASKRUNNER", id=id_)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_unknown(raw: dict[str, Any]) -> list[CheckMessage]:
    from django_taskrunner.conf import DEFAULTS

    errors: list[CheckMessage] = []
    for key in raw:
        if key in DEFAULTS:
            continue
        close = difflib.get_close_matches(str(key), DEFAULTS, n=1)
        hint = f'did you mean "{close[0]}"?' if close else "see docs/settings.md for the keys"
        errors.append(_error(f'unknown key "{key}" in TASKRUNNER', "taskrunner.E001", hint))
    return errors


# key -> (kind, minimum, id); kind "int" or "number"; minimum inclusive
_NUMBERS: dict[str, tuple[str, float, str]] = {
    "BATCH_SIZE": ("int", 1, "taskrunner.E002"),
    "BLOCK_MS": ("int", 1, "taskrunner.E002"),
    "MAX_WORKERS": ("int", 1, "taskrunner.E002"),
    "RESERVATION_TIMEOUT": ("number", 1, "taskrunner.E002"),
    "DESIRED_WAIT": ("number", 0.001, "taskrunner.E002"),
    "TUNING_COOLDOWN": ("number", 0, "taskrunner.E002"),
    "STATS_INTERVAL": ("number", 0.05, "taskrunner.E002"),
    "STATS_WINDOW": ("int", 1, "taskrunner.E002"),
    "LONG_QUEUE_COOLDOWN": ("number", 0.001, "taskrunner.E002"),
    "SHUTDOWN_TIMEOUT": ("number", 0, "taskrunner.E002"),
    "LONG_QUEUE_THRESHOLD": ("number", 0, "taskrunner.E002"),
    "SOCKET_TIMEOUT": ("number", 0.001, "taskrunner.E002"),
    "CONNECT_TIMEOUT": ("number", 0.001, "taskrunner.E002"),
    "LEADER_LEASE": ("number", 1, "taskrunner.E002"),
    "TIME_LIMIT_GRACE": ("number", 0, "taskrunner.E002"),
    "DEAD_CONSUMER_TIMEOUT": ("number", 1, "taskrunner.E002"),
}


# Numbers whose None means "computed from other settings".
_NONE_ALLOWED = frozenset({"DEAD_CONSUMER_TIMEOUT"})


def _check_numbers(raw: dict[str, Any]) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for key, (kind, minimum, id_) in _NUMBERS.items():
        if key not in raw or (key in _NONE_ALLOWED and raw[key] is None):
            continue
        value = raw[key]
        ok_type = isinstance(value, int) and not isinstance(value, bool) if kind == "int" else (
            _is_number(value)
        )
        if not ok_type or value < minimum:
            what = "an integer" if kind == "int" else "a number"
            errors.append(
                _error(f"TASKRUNNER[{key!r}] must be {what} >= {minimum:g}, not {value!r}", id_)
            )
    min_workers = raw.get("MIN_WORKERS")
    if min_workers is not None:
        if not isinstance(min_workers, int) or isinstance(min_workers, bool) or min_workers < 1:
            errors.append(
                _error(
                    f"TASKRUNNER['MIN_WORKERS'] must be None or an integer >= 1, "
                    f"not {min_workers!r}",
                    "taskrunner.E002",
                )
            )
        elif isinstance(raw.get("MAX_WORKERS", 8), int) and min_workers > raw.get("MAX_WORKERS", 8):
            errors.append(
                _error("TASKRUNNER['MIN_WORKERS'] is larger than MAX_WORKERS", "taskrunner.E003")
            )
    block_ms, socket_timeout = raw.get("BLOCK_MS", 1000), raw.get("SOCKET_TIMEOUT", 10)
    if _is_number(block_ms) and _is_number(socket_timeout) and block_ms / 1000 >= socket_timeout:
        errors.append(
            _error(
                f"TASKRUNNER['BLOCK_MS'] ({block_ms} ms) must be shorter than SOCKET_TIMEOUT "
                f"({socket_timeout} s), or every idle read times out",
                "taskrunner.E009",
            )
        )
    return errors


def _check_tuning(raw: dict[str, Any]) -> list[CheckMessage]:
    """The tolerance must leave room below DESIRED_WAIT, or the pool could never shrink."""
    tolerance, desired = raw.get("DESIRED_WAIT_TOLERANCE"), raw.get("DESIRED_WAIT", 1.0)
    if tolerance is None:
        return []
    if not _is_number(tolerance) or tolerance < 0:
        return [_error(f"TASKRUNNER['DESIRED_WAIT_TOLERANCE'] must be None or a number >= 0, "
                       f"not {tolerance!r}", "taskrunner.E002")]
    if _is_number(desired) and tolerance >= desired:
        return [_error(f"TASKRUNNER['DESIRED_WAIT_TOLERANCE'] ({tolerance:g} s) must be smaller "
                       f"than DESIRED_WAIT ({desired:g} s), or an autoscaled pool never shrinks",
                       "taskrunner.E003")]
    return []


def _check_names(raw: dict[str, Any]) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for key, pattern in (("PREFIX", PREFIX_NAME), ("CONSUMER_GROUP", PREFIX_NAME),
                         ("DEFAULT_QUEUE", QUEUE_NAME)):
        if key in raw and not (isinstance(raw[key], str) and pattern.match(raw[key])):
            errors.append(
                _error(
                    f"TASKRUNNER[{key!r}] must be a name of letters, digits, '.', '_' or '-' "
                    f"(no ':', '{{' or '}}'), not {raw[key]!r}",
                    "taskrunner.E004",
                )
            )
    for key in ("REDIS_URL", "CONNECTION", "FAILED_TASK_HANDLER", "LONG_QUEUE_HOOK",
                "METRICS_TOKEN"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            errors.append(
                _error(f"TASKRUNNER[{key!r}] must be a string or None", "taskrunner.E005"))
    token = raw.get("METRICS_TOKEN")
    if isinstance(token, str) and len(token) < 16:
        errors.append(_error("TASKRUNNER['METRICS_TOKEN'] must be at least 16 characters long",
                             "taskrunner.E005", hint="e.g. python -c 'import secrets; "
                             "print(secrets.token_urlsafe())'"))
    url = raw.get("REDIS_URL")
    if isinstance(url, str) and not url.startswith(("redis://", "rediss://", "unix://")):
        errors.append(
            _error(
                f"TASKRUNNER['REDIS_URL'] must start with redis://, rediss:// or unix://, "
                f"not {url!r}",
                "taskrunner.E005",
            )
        )
    chosen = [key for key in ("REDIS_URL", "CONNECTION", "CLUSTER_NODES") if raw.get(key)]
    if len(chosen) > 1:
        both = "both" if len(chosen) == 2 else "all of"
        errors.append(_error(f"set only one of REDIS_URL, CONNECTION or CLUSTER_NODES, not "
                             f"{both} {' and '.join(chosen)}", "taskrunner.E006",
                             hint="a REDIS_URL may name any node of a cluster; its client "
                                  "then finds the others"))
    errors += _check_cluster_nodes(raw.get("CLUSTER_NODES"))
    if "DELETE_ON_ACK" in raw and not isinstance(raw["DELETE_ON_ACK"], bool):
        errors.append(
            _error("TASKRUNNER['DELETE_ON_ACK'] must be True or False", "taskrunner.E005"))
    return errors


def _check_cluster_nodes(nodes: Any) -> list[CheckMessage]:
    """None, or a non-empty list of "host:port" strings."""
    from django_taskrunner.store.nodes import parse_node

    if nodes is None:
        return []
    message = 'TASKRUNNER["CLUSTER_NODES"] must be a non-empty list of "host:port"'
    if not isinstance(nodes, list | tuple) or not nodes:
        return [_error(f"{message}, not {nodes!r}", "taskrunner.E005")]
    errors: list[CheckMessage] = []
    for node in nodes:
        try:
            parse_node(node)
        except (TypeError, ValueError, AttributeError):
            errors.append(_error(f"{message}; {node!r} is not one", "taskrunner.E005"))
    return errors


def _check_shards(raw: dict[str, Any]) -> list[CheckMessage]:
    """SHARDS: a count for every queue, or {queue name: count}; counts 1..MAX_SHARDS."""
    if "SHARDS" not in raw:
        return []
    value = raw["SHARDS"]
    counts = value if isinstance(value, dict) else {"*": value}
    errors: list[CheckMessage] = []
    for queue, count in counts.items():
        if queue != "*" and not (isinstance(queue, str) and QUEUE_NAME.match(queue)):
            errors.append(_error(f"TASKRUNNER['SHARDS'] names {queue!r}, which is not a "
                                 f"queue name", "taskrunner.E011"))
        if isinstance(count, bool) or not isinstance(count, int) or not (
                1 <= count <= MAX_SHARDS):
            errors.append(_error(f"TASKRUNNER['SHARDS'] must be a number of shards from 1 to "
                                 f"{MAX_SHARDS}, or a dict of queue name -> that number; "
                                 f"not {count!r}", "taskrunner.E011"))
    return errors


def validate_settings(raw: Any) -> list[CheckMessage]:
    """Every problem with a raw `TASKRUNNER` value; empty when it is usable."""
    if not isinstance(raw, dict):
        return [_error("TASKRUNNER must be a dict", "taskrunner.E000")]
    return (_check_unknown(raw) + _check_numbers(raw) + _check_tuning(raw) + _check_names(raw)
            + _check_shards(raw))


def _check_connection_alias(raw: dict[str, Any]) -> list[CheckMessage]:
    alias = raw.get("CONNECTION")
    if not isinstance(alias, str):
        return []
    from django.conf import settings

    caches = getattr(settings, "CACHES", {})
    if alias not in caches:
        return [_error(f"TASKRUNNER['CONNECTION'] names cache {alias!r}, which is not in CACHES",
                       "taskrunner.E007")]
    backend = str(caches[alias].get("BACKEND", ""))
    if not backend.startswith("django_redis."):
        return [
            _error(
                f"TASKRUNNER['CONNECTION'] names cache {alias!r}, whose backend {backend!r} "
                f"is not a django-redis cache",
                "taskrunner.E007",
                hint="use django_redis.cache.RedisCache, or set REDIS_URL instead",
            )
        ]
    return []


def _check_handler_paths(raw: dict[str, Any]) -> list[CheckMessage]:
    from django.utils.module_loading import import_string

    errors: list[CheckMessage] = []
    for key in ("FAILED_TASK_HANDLER", "LONG_QUEUE_HOOK"):
        path = raw.get(key)
        if not isinstance(path, str):
            continue
        try:
            target = import_string(path)
        except ImportError as exc:
            errors.append(
                _error(f"TASKRUNNER[{key!r}] cannot be imported: {exc}", "taskrunner.E008"))
            continue
        if not callable(target):
            errors.append(
                _error(f"TASKRUNNER[{key!r}] = {path!r} is not callable", "taskrunner.E008"))
    return errors


@register(Tags.compatibility)
def check_taskrunner_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Django system check: report every bad `TASKRUNNER` value at start-up."""
    from django.conf import settings

    from django_taskrunner.conf import user_settings

    raw = getattr(settings, "TASKRUNNER", {})
    errors = validate_settings(raw)
    if isinstance(raw, dict):
        raw = user_settings()
        errors += _check_connection_alias(raw) + _check_handler_paths(raw)
    return errors
