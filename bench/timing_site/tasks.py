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


def probe_keys(run: str) -> tuple[str, str]:
    """(list of "n:lateness ms", runs per probe n) of a run of `probe`."""
    prefix = get_settings().PREFIX
    return f"{prefix}:bench:probe:{run}:late", f"{prefix}:bench:probe:{run}:runs"


@task(queue="bench")
def probe(payload: Any) -> None:
    """Like `record_lateness`, and counts each probe's runs (exactly once, or not)."""
    started = clock.now_ms()
    late, runs = probe_keys(payload["run"])
    pipe = get_redis().pipeline(transaction=False)
    pipe.rpush(late, f"{payload['n']}:{started - int(payload['due'])}")
    pipe.hincrby(runs, str(payload["n"]), 1)
    pipe.execute()
