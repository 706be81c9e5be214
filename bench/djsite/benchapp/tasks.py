"""The benchmark job as a django-taskrunner task (autodiscovered)."""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any

from benchlib.async_io import io_done
from benchlib.job import job as run_job
from benchlib.orm_job import orm_job

from django_taskrunner import task
from django_taskrunner.store.connection import get_redis


@task(name="bench.job")
def job(payload: Any) -> None:
    run_job(payload)


@task(name="bench.orm")
def orm(payload: Any) -> None:
    """bench/orm.py: insert one row through the ORM and read it back."""
    orm_job(payload)


@task(name="bench.noop")
def noop(payload: Any) -> None:
    """bench/handle_cost.py: the runner's own cost per task, nothing else."""


# bench/prefetch.py runs its worker in its own process: runs counted in memory, by task.
counted_runs: collections.Counter[int] = collections.Counter()


@task(name="bench.counted")
def counted(payload: Any) -> None:
    """bench/prefetch.py: a no-op that counts its runs in this process (exactly once)."""
    counted_runs[payload["i"]] += 1


@task(name="bench.sized")
def sized(payload: Any) -> dict[str, Any]:
    """bench/records.py: a task whose record holds a small result."""
    return {"n": payload["n"], "ok": True}


@task(name="bench.async_io")
async def async_io(payload: Any) -> None:
    """Awaits `ms` of simulated I/O, then counts itself done (bench/async_io.py)."""
    await asyncio.sleep(payload["ms"] / 1000)
    io_done(payload["n"])


@task(name="bench.sync_io")
def sync_io(payload: Any) -> None:
    """The same wait, blocking a worker thread (the comparison row of bench/async_io.py)."""
    time.sleep(payload["ms"] / 1000)
    io_done(payload["n"])


@task(name="bench.wf_member")
def wf_member(payload: Any) -> int:
    """bench/workflows.py: a no-op group member returning its number."""
    return payload["n"]


@task(name="bench.wf_done", takes_context=True)
def wf_done(ctx: Any, payload: Any) -> None:
    """bench/workflows.py: the group's callback notes when it ran (and how many results)."""
    get_redis().rpush("bench:wf:done", f"{time.time()}:{len(ctx.parent_result)}")


def spin(loops: int) -> int:
    """Pure-Python work: holds the GIL the whole time, as CPU-bound task code does."""
    total = 0
    for i in range(loops):
        total += i * i % 7
    return total


@task(name="bench.cpu")
def cpu(payload: Any) -> None:
    """bench/processes.py: about 20 ms of pure Python; records when the first started and
    the last ended (epoch ms, in Redis: the worker processes share nothing else)."""
    client = get_redis()
    client.set(f"bench:cpu:{payload['run']}:first", int(time.time() * 1000), nx=True)
    spin(payload["loops"])
    pipe = client.pipeline(transaction=False)
    pipe.set(f"bench:cpu:{payload['run']}:last", int(time.time() * 1000))
    pipe.incr(f"bench:cpu:{payload['run']}:done")
    pipe.execute()
