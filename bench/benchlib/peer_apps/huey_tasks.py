"""Huey on Redis (blocking reads, its default), results not stored."""

from __future__ import annotations

import os

from benchlib.job import job as run_job
from benchlib.orm_job import orm_job
from django.db import close_old_connections
from huey import RedisHuey

huey = RedisHuey("bench", url=os.environ["BENCH_REDIS_URL"], results=False)


@huey.task()
def job(payload: dict) -> None:
    run_job(payload)


@huey.task()
def orm(payload: dict) -> None:
    """As huey.contrib.djhuey's db_task does: close_old_connections() before and after."""
    close_old_connections()
    try:
        orm_job(payload)
    finally:
        close_old_connections()
