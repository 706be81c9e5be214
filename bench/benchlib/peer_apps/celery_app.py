"""Celery on the Redis broker, results ignored; run with the solo pool."""

from __future__ import annotations

import os

from benchlib.job import job as run_job
from celery import Celery

app = Celery("bench", broker=os.environ["BENCH_REDIS_URL"])
app.conf.update(
    task_ignore_result=True,
    task_default_queue="bench",
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


@app.task(name="bench.job")
def job(payload: dict) -> None:
    run_job(payload)
