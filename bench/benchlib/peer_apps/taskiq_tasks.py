"""Taskiq with taskiq-redis' Redis Streams broker, as its docs set it up: the
broker's defaults (ack after the task ran), no result backend; run with
`taskiq worker ... --workers 1` (one process, up to 100 tasks awaited side by side)."""

from __future__ import annotations

import os
from typing import Any

from benchlib.job import job as run_job
from taskiq_redis import RedisStreamBroker

broker = RedisStreamBroker(os.environ["BENCH_REDIS_URL"], queue_name="bench")


@broker.task(task_name="bench.job")
async def job(payload: dict[str, Any]) -> None:
    """The same job as every system's (one INCR, from a sync client), as an `async def`."""
    run_job(payload)
