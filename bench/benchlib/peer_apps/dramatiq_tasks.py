"""Dramatiq on its Redis broker, default middleware."""

from __future__ import annotations

import os

import dramatiq
from benchlib.job import job as run_job
from dramatiq.brokers.redis import RedisBroker

dramatiq.set_broker(RedisBroker(url=os.environ["BENCH_REDIS_URL"]))


@dramatiq.actor(queue_name="bench")
def job(payload: dict) -> None:
    run_job(payload)
