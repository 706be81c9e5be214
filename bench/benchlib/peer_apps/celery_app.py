"""Celery on the Redis broker, results ignored; run with the solo pool."""

from __future__ import annotations

import os

from benchlib.job import job as run_job
from benchlib.orm_job import orm_job
from celery import Celery

app = Celery("bench", broker=os.environ["BENCH_REDIS_URL"])
app.conf.update(
    task_ignore_result=True,
    task_default_queue="bench",
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)
# bench/orm.py: Celery's Django fix-up closes the database connection before and after
# every task unless CELERY_DB_REUSE_MAX is set (then every that-many tasks).
if os.environ.get("BENCH_CELERY_DB_REUSE_MAX"):
    app.conf["CELERY_DB_REUSE_MAX"] = int(os.environ["BENCH_CELERY_DB_REUSE_MAX"])


@app.task(name="bench.job")
def job(payload: dict) -> None:
    run_job(payload)


@app.task(name="bench.orm")
def orm(payload: dict) -> None:
    orm_job(payload)
