"""The benchmark job as a django-taskrunner task (autodiscovered)."""

from __future__ import annotations

from typing import Any

from benchlib.job import job as run_job

from django_taskrunner import task


@task(name="bench.job")
def job(payload: Any) -> None:
    run_job(payload)


@task(name="bench.sized")
def sized(payload: Any) -> dict[str, Any]:
    """bench/records.py: a task whose record holds a small result."""
    return {"n": payload["n"], "ok": True}
