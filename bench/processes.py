"""`runtasks --processes`: CPU-bound Python tasks on several cores, and the no-op drain.

    python bench/processes.py [--tasks 300] [--noops 20000]

On a private redis-server, with every worker pinned to CPUs 0 and 1 (taskset):

1. CPU-bound: `--tasks` tasks of about 20 ms of pure Python each (calibrated here),
   run by `runtasks --concurrency 1` (one process, no supervisor) and by
   `runtasks --processes 2 --concurrency 1`. Throughput is counted from the first task's
   start to the last one's end (the tasks write both to Redis), so start-up is left out.
   The ratio is the gain of the second process: the GIL lets one process use one core.
2. No-op drain: `--noops` tasks that do nothing, dispatched in one go to workers already
   started (`--concurrency 8`), one process against `--processes 2`: from the dispatch
   to an empty stream, with nothing pending.

`--processes 1` (the default) is not measured apart: it runs no supervisor, the very
code of a plain `runtasks`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from benchlib import procs  # noqa: E402

CPUS = {0, 1}
TARGET_RATIO = 1.7


def worker(url: str, *args: str) -> subprocess.Popen[bytes]:
    """`runtasks` pinned to CPUs 0 and 1, in a session of its own (killed as a group)."""

    def pin() -> None:
        procs.die_with_parent()
        if procs.can_pin():
            os.sched_setaffinity(0, CPUS)

    return subprocess.Popen(
        procs.python("-m", "django", "runtasks", "--log-level",
                     os.environ.get("BENCH_LOG_LEVEL", "WARNING"), *args),
        cwd=procs.bench_dir(), env=procs.child_env(url),
        stdout=None if os.environ.get("BENCH_LOG_LEVEL") else subprocess.DEVNULL,
        stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=pin)


def calibrate(target_s: float = 0.020) -> int:
    """Loops of `spin` that take about `target_s` here."""
    from djsite.benchapp.tasks import spin

    loops = 100_000
    started = time.perf_counter()
    spin(loops)
    return max(1000, int(loops * target_s / (time.perf_counter() - started)))


def cpu_run(url: str, run: str, count: int, loops: int, *args: str) -> float:
    """Tasks per second of the CPU-bound task, first start to last end."""
    from django_taskrunner import dispatch_many
    from django_taskrunner.store.connection import get_redis

    client = get_redis()
    dispatch_many("bench.cpu", [{"run": run, "loops": loops} for _ in range(count)])
    proc = worker(url, "--concurrency", "1", *args)
    try:
        while int(client.get(f"bench:cpu:{run}:done") or 0) < count:
            time.sleep(0.05)
    finally:
        procs.kill(proc)
    first, last = (int(client.get(f"bench:cpu:{run}:{end}")) for end in ("first", "last"))
    return count / ((last - first) / 1000)


def drain_run(url: str, count: int, name: str, *args: str) -> float:
    """Seconds from the dispatch of `count` no-ops to an empty stream."""
    from django_taskrunner import dispatch_many
    from django_taskrunner.store import get_store, keys

    broker = get_store().streams
    broker.ensure_group("default")
    expected = 2 if "--processes" in args else 1
    proc = worker(url, "--concurrency", "8", "--queue", "default", "--consumer-name", name,
                  *args)

    def readers() -> int:
        """Worker processes of this run with a heartbeat (a private Redis: KEYS is fine)."""
        return len(broker.client.keys(keys.worker_key(broker.prefix, name) + "*"))

    try:
        deadline = time.monotonic() + 120
        while readers() < expected:  # every worker process is up
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"the worker {name} did not start reading")
            time.sleep(0.05)
        time.sleep(1)
        # what earlier, killed workers left (acks never sent): not this run's
        length, pending = broker.length("default"), broker.pending("default")
        started = time.perf_counter()
        for first in range(0, count, 1000):
            dispatch_many("bench.noop", [{"n": n} for n in range(first, min(count, first + 1000))])
        deadline = time.monotonic() + 600
        while broker.length("default") > length or broker.pending("default") > pending:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the drain did not end: length {broker.length('default')} "
                                   f"(was {length}), pending {broker.pending('default')} "
                                   f"(was {pending})")
            time.sleep(0.005)
        return time.perf_counter() - started
    finally:
        procs.kill(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--noops", type=int, default=20_000)
    args = parser.parse_args()
    if not procs.can_pin():
        print("note: cannot pin to CPUs 0 and 1 here; figures are unpinned")
    with procs.private_redis() as redis:
        os.environ.update(procs.child_env(redis.url))
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        loops = calibrate()
        one = cpu_run(redis.url, "one", args.tasks, loops)
        two = cpu_run(redis.url, "two", args.tasks, loops, "--processes", "2")
        print(f"CPU-bound, {args.tasks} tasks of ~20 ms pure Python ({loops} loops), "
              f"pinned to 2 CPUs:")
        print(f"  one process:  {one:7.1f} tasks/s")
        print(f"  --processes 2: {two:7.1f} tasks/s   ratio {two / one:.2f}x "
              f"(target >= {TARGET_RATIO}x)")
        single = drain_run(redis.url, args.noops, "single")
        double = drain_run(redis.url, args.noops, "double", "--processes", "2")
        print(f"No-op drain of {args.noops} tasks, --concurrency 8:")
        print(f"  one process:   {single:6.2f} s  ({args.noops / single:8.0f} tasks/s)")
        print(f"  --processes 2: {double:6.2f} s  ({args.noops / double:8.0f} tasks/s)   "
              f"ratio {single / double:.2f}x")


if __name__ == "__main__":
    main()
