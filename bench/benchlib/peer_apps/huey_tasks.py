"""Huey on Redis (blocking reads, its default), results not stored."""

from __future__ import annotations

import os

from benchlib.job import job as run_job
from huey import RedisHuey

huey = RedisHuey("bench", url=os.environ["BENCH_REDIS_URL"], results=False)


@huey.task()
def job(payload: dict) -> None:
    run_job(payload)
