"""The producer process: dispatches tasks of one system and prints what it timed.

`python -m benchlib.producer SYSTEM MODE N [--rate R] [--smoke]` prints one JSON line,
`{"seconds": ...}`, timing only the dispatch loop (imports and set-up excluded).
Modes: `plain` (one call per task), `many` (batches of 100, where the system has a
batch call), `latency` (N tasks at R per second, each carrying its dispatch time),
and for the system `raw`: `xadd`, `xadd-pipe`, `read` (XREADGROUP COUNT 100 + XACK).
With `--paired`, plain and batch dispatch alternate with raw redis-py XADD in chunks of
1,000 tasks and also print `raw_seconds`, the time of the raw XADDs: a ratio measured
in one place. Taskiq and streaQ are async: their producer runs in one event loop and
awaits each call in turn, as an async caller would (`ASYNC_SENDERS`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import redis
from benchlib import bare_worker

BATCH = 100
CHUNK = 1000  # tasks per turn when the system and raw XADD alternate
Send = Callable[[Any], None]
SendMany = Callable[[list[Any]], None]
AsyncSend = Callable[[Any], Awaitable[object]]


def url() -> str:
    return os.environ["BENCH_REDIS_URL"]


def bare_senders() -> tuple[Send, SendMany]:
    client = redis.Redis.from_url(url())

    def send(payload: Any) -> None:
        client.xadd(bare_worker.STREAM, {"m": json.dumps({"payload": payload})})

    def send_many(payloads: list[Any]) -> None:
        pipe = client.pipeline(transaction=False)
        for payload in payloads:
            pipe.xadd(bare_worker.STREAM, {"m": json.dumps({"payload": payload})})
        pipe.execute()

    return send, send_many


def taskrunner_senders(name: str = "job") -> tuple[Send, SendMany]:
    os.environ["DJANGO_SETTINGS_MODULE"] = "djsite.settings"
    import django

    django.setup()
    from djsite.benchapp import tasks

    job = getattr(tasks, name)
    return job.dispatch, job.dispatch_many


def celery_senders(name: str = "job") -> tuple[Send, None]:
    from benchlib.peer_apps import celery_app

    return getattr(celery_app, name).delay, None


def rq_senders(name: str = "job") -> tuple[Send, None]:
    from benchlib.peer_apps import rq_tasks

    q, job = rq_tasks.queue(), getattr(rq_tasks, name)
    return (lambda payload: q.enqueue(job, payload)), None


def dramatiq_senders(name: str = "job") -> tuple[Send, None]:
    from benchlib.peer_apps import dramatiq_tasks

    return getattr(dramatiq_tasks, name).send, None


def huey_senders(name: str = "job") -> tuple[Send, None]:
    from benchlib.peer_apps import huey_tasks

    return getattr(huey_tasks, name), None


def tasksdb_senders(name: str = "orm") -> tuple[Send, None]:
    """django-tasks' database backend (bench/orm.py only): each enqueue is an INSERT."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "djsite.tasksdb_settings"
    import django

    django.setup()
    from benchlib.peer_apps import tasksdb_tasks

    return getattr(tasksdb_tasks, name).enqueue, None


@contextlib.asynccontextmanager
async def taskiq_senders() -> AsyncIterator[AsyncSend]:
    """Taskiq's client: `broker.startup()` first (it also creates the consumer group, so
    the worker started later reads what was queued before it), then `kiq`."""
    from benchlib.peer_apps import taskiq_tasks

    await taskiq_tasks.broker.startup()
    try:
        yield taskiq_tasks.job.kiq
    finally:
        await taskiq_tasks.broker.shutdown()


@contextlib.asynccontextmanager
async def streaq_senders() -> AsyncIterator[AsyncSend]:
    """streaQ's client: enqueue inside the worker's async context manager."""
    from benchlib.peer_apps import streaq_tasks

    async def send(payload: Any) -> object:
        return await streaq_tasks.job.enqueue(payload)

    async with streaq_tasks.worker:
        yield send


ASYNC_SENDERS = {"taskiq": taskiq_senders, "streaq": streaq_senders}

SENDERS = {
    "bare": bare_senders, "taskrunner": taskrunner_senders, "celery": celery_senders,
    "rq": rq_senders, "dramatiq": dramatiq_senders, "huey": huey_senders,
    "tasksdb": tasksdb_senders,
}


def payloads(n: int, smoke: bool) -> Iterator[dict[str, Any]]:
    for i in range(n):
        yield {"i": i} if smoke else {}


def numbered(n: int) -> Iterator[dict[str, Any]]:
    """bench/orm.py: every task carries its number, the row it inserts."""
    for i in range(n):
        yield {"i": i}


def timed_plain(send: Send, items: list[Any]) -> float:
    start = time.perf_counter()
    for payload in items:
        send(payload)
    return time.perf_counter() - start


def timed_many(send_many: SendMany, items: list[Any]) -> float:
    batches = [items[i:i + BATCH] for i in range(0, len(items), BATCH)]
    start = time.perf_counter()
    for batch in batches:
        send_many(batch)
    return time.perf_counter() - start


def paired(timed: Callable[[list[Any]], float], raw_mode: str, items: list[Any]
           ) -> tuple[float, float]:
    """(system seconds, raw seconds): chunks of the system's calls alternate with as many
    raw redis-py XADDs, so a load swing on a shared machine hits both alike."""
    from benchlib import raw

    client, raw_call = redis.Redis.from_url(url()), raw.MODES[raw_mode]
    system_s = raw_s = 0.0
    for number, first in enumerate(range(0, len(items), CHUNK)):
        chunk = items[first:first + CHUNK]
        if number % 2:
            system_s += timed(chunk)
            raw_s += raw_call(client, len(chunk))
        else:
            raw_s += raw_call(client, len(chunk))
            system_s += timed(chunk)
    return system_s, raw_s


async def async_timed_plain(send: AsyncSend, items: list[Any]) -> float:
    start = time.perf_counter()
    for payload in items:
        await send(payload)
    return time.perf_counter() - start


async def async_paired(send: AsyncSend, items: list[Any]) -> tuple[float, float]:
    """`paired` for an async library: its chunks awaited call by call in this loop, the
    raw XADDs the same blocking redis-py calls as for everyone."""
    from benchlib import raw

    client, raw_call = redis.Redis.from_url(url()), raw.MODES["xadd"]
    system_s = raw_s = 0.0
    for number, first in enumerate(range(0, len(items), CHUNK)):
        chunk = items[first:first + CHUNK]
        if number % 2:
            system_s += await async_timed_plain(send, chunk)
            raw_s += raw_call(client, len(chunk))
        else:
            raw_s += raw_call(client, len(chunk))
            system_s += await async_timed_plain(send, chunk)
    return system_s, raw_s


async def async_timed_latency(send: AsyncSend, n: int, rate: float) -> float:
    """`timed_latency` in an event loop: it sleeps with `asyncio.sleep`."""
    start = time.perf_counter()
    for i in range(n):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await send({"t": time.time()})
    return time.perf_counter() - start


async def run_async(system: str, args: argparse.Namespace) -> tuple[float, float | None]:
    """(seconds, raw seconds or None) of an async library's producer."""
    async with ASYNC_SENDERS[system]() as send:
        items = list(payloads(args.n, args.smoke))
        if args.mode == "plain" and args.paired:
            return await async_paired(send, items)
        if args.mode == "plain":
            return await async_timed_plain(send, items), None
        if args.mode == "latency":
            return await async_timed_latency(send, args.n, args.rate), None
        raise SystemExit(f"{system} has no mode {args.mode!r} (no batch dispatch)")


def timed_latency(send: Send, n: int, rate: float) -> float:
    """Offer `n` tasks at `rate` per second on a fixed schedule (no coordinated omission)."""
    start = time.perf_counter()
    for i in range(n):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        send({"t": time.time()})
    return time.perf_counter() - start


def run_raw(mode: str, n: int) -> float:
    from benchlib import raw

    return raw.MODES[mode](redis.Redis.from_url(url()), n)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("system")
    parser.add_argument("mode")
    parser.add_argument("n", type=int)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--paired", action="store_true", help="alternate with raw XADD")
    parser.add_argument("--job", default="job", choices=["job", "orm"],
                        help="the task dispatched: the no-op job, or bench/orm.py's ORM job")
    args = parser.parse_args(argv)
    raw_seconds = None
    if args.system == "raw":
        seconds = run_raw(args.mode, args.n)
    elif args.system in ASYNC_SENDERS:
        if args.job != "job":
            raise SystemExit(f"{args.system}: only the no-op job")
        seconds, raw_seconds = asyncio.run(run_async(args.system, args))
    else:
        send, send_many = (SENDERS[args.system]() if args.job == "job"
                           else SENDERS[args.system](args.job))
        items = list(payloads(args.n, args.smoke) if args.job == "job" else numbered(args.n))
        if args.mode == "plain" and args.paired:
            seconds, raw_seconds = paired(lambda chunk: timed_plain(send, chunk), "xadd", items)
        elif args.mode == "plain":
            seconds = timed_plain(send, items)
        elif args.mode == "many":
            if send_many is None:
                raise SystemExit(f"{args.system} has no batch dispatch")
            if args.paired:
                seconds, raw_seconds = paired(lambda chunk: timed_many(send_many, chunk),
                                              "xadd-pipe", items)
            else:
                seconds = timed_many(send_many, items)
        elif args.mode == "latency":
            seconds = timed_latency(send, args.n, args.rate)
        else:
            raise SystemExit(f"unknown mode {args.mode!r}")
    print(json.dumps({"seconds": seconds, "raw_seconds": raw_seconds}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
