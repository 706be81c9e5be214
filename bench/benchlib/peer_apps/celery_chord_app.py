"""Celery's chord for bench/workflows.py: Redis broker and Redis result backend (the
chord counts its members there); no-op members returning their number, a callback that
notes when it ran."""

from __future__ import annotations

import os
import time

import redis
from celery import Celery

app = Celery("bench_chord", broker=os.environ["BENCH_REDIS_URL"],
             backend=os.environ["BENCH_REDIS_URL"])
app.conf.update(
    task_default_queue="wf",
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    result_expires=3600,
)


@app.task(name="bench.chord_member")
def member(n: int) -> int:
    return n


@app.task(name="bench.chord_done")
def done(results: list[int]) -> None:
    client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    client.rpush("bench:wf:done", f"{time.time()}:{len(results)}")
