"""The benchmark's task: records how late it started, in ms, against its due time."""

from __future__ import annotations

from typing import Any

from django_taskrunner import task
from django_taskrunner.conf import get_settings
from django_taskrunner.core import clock
from django_taskrunner.store.connection import get_redis


def lateness_key(run: str) -> str:
    return f"{get_settings().PREFIX}:bench:lateness:{run}"


@task(queue="bench")
def record_lateness(payload: Any) -> None:
    started = clock.now_ms()
    get_redis().rpush(lateness_key(payload["run"]), started - int(payload["due"]))
