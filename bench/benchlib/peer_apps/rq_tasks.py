"""RQ: the job function (importable by path) and a SimpleWorker entry point."""

from __future__ import annotations

import os

import redis
from benchlib.job import job as run_job
from benchlib.orm_job import orm_job
from rq import Queue
from rq.worker import SimpleWorker

QUEUE = "bench"


def job(payload: dict) -> None:
    run_job(payload)


def orm(payload: dict) -> None:
    """No connection hygiene: RQ has none (the connection lives as long as the worker)."""
    orm_job(payload)


def queue() -> Queue:
    return Queue(QUEUE, connection=redis.Redis.from_url(os.environ["BENCH_REDIS_URL"]))


def main() -> None:
    q = queue()
    SimpleWorker([q], connection=q.connection).work(logging_level="WARNING")


if __name__ == "__main__":
    main()
