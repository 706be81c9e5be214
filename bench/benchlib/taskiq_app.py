"""The I/O benchmark's task for Taskiq (bench/async_io.py --taskiq-python), on the same
Redis, with Redis Streams and an ack after the task ran (as django-taskrunner does)."""

from __future__ import annotations

import asyncio
import os
import sys

from benchlib.async_io import io_done
from taskiq_redis import RedisStreamBroker

broker = RedisStreamBroker(os.environ["BENCH_REDIS_URL"], queue_name="bench:taskiq")


@broker.task(task_name="bench.taskiq_io")
async def taskiq_io(n: int, ms: int) -> None:
    await asyncio.sleep(ms / 1000)
    io_done(n)


async def queue_tasks(tasks: int, ms: int) -> None:
    await broker.startup()
    for start in range(0, tasks, 500):
        await asyncio.gather(*(taskiq_io.kiq(n, ms)
                               for n in range(start, min(tasks, start + 500))))
    await broker.shutdown()


if __name__ == "__main__":  # python -m benchlib.taskiq_app TASKS MS: queue them
    asyncio.run(queue_tasks(int(sys.argv[1]), int(sys.argv[2])))
