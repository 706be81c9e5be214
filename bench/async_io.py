"""Async I/O tasks drained by one worker process, against the ideal.

    python bench/async_io.py [--tasks 2000] [--ms 50] [--concurrency 100 500]

Each task awaits `--ms` milliseconds (`asyncio.sleep`, standing for an HTTP call or a
query) and then counts itself done. The tasks are queued first; then one
`runtasks --concurrency 1` process (one thread) drains them with `ASYNC_CONCURRENCY` set
to each `--concurrency` value in turn. The drain is the time from the first task's
finish to the last one's (start-up left out), against the ideal of
tasks x ms / concurrency. A row runs the same wait as a plain `def` task
(`time.sleep`) on 8 threads, for scale; with `--taskiq-python PATH` (a Python with
`taskiq` and `taskiq-redis` installed) a row per concurrency runs the same task under
Taskiq (`taskiq worker --workers 1 --max-async-tasks N`, Redis Streams) on the same Redis.

It starts its own redis-server (no persistence) on a free port.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]

from benchlib import async_io, procs  # noqa: E402

SYNC_THREADS = 8
BATCH = int(os.environ.get("BENCH_BATCH", "100"))


def queue_tasks(task_name: str, tasks: int, ms: int) -> None:
    from django_taskrunner import dispatch_many

    for start in range(0, tasks, 500):
        dispatch_many(task_name, [{"n": n, "ms": ms}
                                  for n in range(start, min(tasks, start + 500))])


def drain(url: str, task_name: str, tasks: int, ms: int, *, threads: int,
          async_slots: int) -> float:
    """Queue the tasks, run one worker until all are done; the drain in seconds."""
    async_io.reset()
    queue_tasks(task_name, tasks, ms)
    env = procs.child_env(url, BENCH_ASYNC_CONCURRENCY=str(async_slots))
    worker = procs.spawn(procs.python("-m", "django", "runtasks", "--concurrency",
                                      str(threads), "--no-scheduler", "--batch-size", str(BATCH)),
                         cpu=1, env=env)
    try:
        deadline = time.monotonic() + 60 + tasks * ms / 1000 / min(threads, async_slots)
        while async_io.finished() < tasks:
            if time.monotonic() > deadline or worker.poll() is not None:
                raise SystemExit(f"timed out with {async_io.finished()} of {tasks} done")
            time.sleep(0.05)
        return async_io.span()
    finally:
        procs.kill(worker)


def drain_taskiq(url: str, python: str, tasks: int, ms: int, slots: int) -> float:
    """The same tasks under Taskiq: queued by its own client, one worker process."""
    async_io.reset()
    env = procs.child_env(url)
    procs.spawn([python, "-m", "benchlib.taskiq_app", str(tasks), str(ms)], cpu=0,
                env=env).wait(120)
    worker = procs.spawn([python, "-m", "taskiq", "worker", "benchlib.taskiq_app:broker",
                          "--workers", "1", "--max-async-tasks", str(slots)], cpu=1, env=env)
    try:
        deadline = time.monotonic() + 60 + tasks * ms / 1000 / slots
        while async_io.finished() < tasks:
            if time.monotonic() > deadline or worker.poll() is not None:
                raise SystemExit(f"taskiq: timed out with {async_io.finished()} of {tasks}")
            time.sleep(0.05)
        return async_io.span()
    finally:
        procs.kill(worker)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--ms", type=int, default=50)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[100, 500])
    parser.add_argument("--taskiq-python", help="a Python that has taskiq and taskiq-redis")
    args = parser.parse_args()
    with procs.private_redis("bench-async-io-") as (workdir, url, _):
        os.environ.update(procs.child_env(url, BENCH_DB=str(Path(workdir) / "bench.sqlite3")))
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        print(f"{args.tasks} tasks of {args.ms} ms, one runtasks process\n")
        print("| tasks | runs as | side by side | drain s | ideal s | drain / ideal |")
        print("|---|---|---|---|---|---|")
        rows = [("bench.async_io", "async def, 1 thread", 1, slots)
                for slots in args.concurrency]
        rows.append(("bench.sync_io", f"def, {SYNC_THREADS} threads", SYNC_THREADS, 1))
        for task_name, kind, threads, slots in rows:
            side_by_side = max(threads, slots) if task_name == "bench.async_io" \
                else threads
            took = drain(url, task_name, args.tasks, args.ms, threads=threads,
                         async_slots=max(slots, 1))
            ideal = args.tasks * args.ms / 1000 / side_by_side
            print(f"| {args.tasks} | {kind} | {side_by_side} | {took:.2f} | "
                  f"{ideal:.2f} | {took / ideal:.2f} |", flush=True)
        for slots in args.concurrency if args.taskiq_python else []:
            took = drain_taskiq(url, args.taskiq_python, args.tasks, args.ms, slots)
            ideal = args.tasks * args.ms / 1000 / slots
            print(f"| {args.tasks} | Taskiq, 1 process | {slots} | {took:.2f} | "
                  f"{ideal:.2f} | {took / ideal:.2f} |", flush=True)


if __name__ == "__main__":
    main()
