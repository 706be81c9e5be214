"""LONG_QUEUE_HOOK targets for the tests: they leave their calls in Redis."""

from __future__ import annotations

import json
from typing import Any

from django_taskrunner import get_redis
from tests.testapp.tasks import runs_key


def record_long_queue(stats: Any) -> None:
    """Count the call and keep the figures it was given."""
    client = get_redis()
    client.hincrby(runs_key(), f"hook:{stats.queue}", 1)
    client.rpush(f"{runs_key()}:hook-figures", json.dumps(stats.as_dict()))


def raising_hook(stats: Any) -> None:
    get_redis().hincrby(runs_key(), f"raising-hook:{stats.queue}", 1)
    raise RuntimeError("the pager is down")
