"""Task records: what they cost the worker, and what one costs Redis.

    taskset -c 0,1 python bench/records.py               # 20,000 no-op tasks, 3 reps
    python bench/records.py --jobs 5000 --reps 1          # a quick look

Each repetition drains the same number of no-op tasks (`dispatch_many`, then
`runtasks --concurrency 1` pinned to its own CPU, Redis and the producer on the other,
as peers.py) twice, side by side: with records (`RESULT_TTL` = 1 day, the default) and
without (`RESULT_TTL = 0`: no record is written at all). It prints the drain rate and
the worker's CPU per task of both, their median over the repetitions and the cost of
records in drain rate (target: at most 15%). Then it dispatches and runs 1,000 tasks
that return a small dict and reads `MEMORY USAGE` of their finished records: bytes per
record in Redis.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import measure, procs  # noqa: E402
from benchlib.systems import TASKRUNNER_WORKER  # noqa: E402

TARGET = 0.15


def one_drain(ctx: measure.Context, ttl: int) -> dict[str, float]:
    """Queue `ctx.jobs` no-op tasks and drain them with one pinned worker."""
    ctx.client.flushall()
    env = procs.child_env(ctx.url, BENCH_RESULT_TTL=str(ttl))
    os.environ["BENCH_RESULT_TTL"] = str(ttl)  # the producer dispatches with it too
    measure.produce(ctx, "taskrunner", "many", ctx.jobs)
    worker = procs.spawn(procs.python(*TASKRUNNER_WORKER, "--concurrency", "1"),
                         cpu=procs.WORKER_CPU, env=env)
    try:
        figures, _cut = measure.drain(ctx, worker)
    finally:
        procs.kill(worker)
    records = sum(1 for _ in ctx.client.scan_iter("bench:record:*", count=1000))
    return {**figures, "records": records}


def record_memory(ctx: measure.Context, n: int = 1000) -> tuple[float, int]:
    """Mean and largest MEMORY USAGE of `n` finished records (tasks returning a dict)."""
    ctx.client.flushall()
    os.environ["BENCH_RESULT_TTL"] = "86400"
    argv = procs.python("-c", (
        "import django; django.setup()\n"
        "from django_taskrunner import dispatch_many\n"
        f"dispatch_many('bench.sized', [{{'n': i}} for i in range({n})])\n"))
    proc = procs.spawn(argv, cpu=procs.LOAD_CPU, env=procs.child_env(ctx.url))
    proc.wait(120)
    worker = procs.spawn(procs.python(*TASKRUNNER_WORKER, "--concurrency", "1", "--burst"),
                         cpu=procs.WORKER_CPU, env=procs.child_env(ctx.url))
    worker.wait(300)
    sizes = [int(ctx.client.memory_usage(key, samples=0) or 0)
             for key in ctx.client.scan_iter("bench:record:*", count=1000)]
    if len(sizes) != n:
        raise SystemExit(f"expected {n} records, found {len(sizes)}")
    return statistics.mean(sizes), max(sizes)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    procs.pin_self(procs.LOAD_CPU)
    workdir = tempfile.mkdtemp(prefix="bench-records-")
    os.environ["BENCH_DB"] = str(Path(workdir) / "bench.sqlite3")
    redis_proc, url = procs.start_redis(workdir)
    ctx = measure.Context(url=url, redis_proc=redis_proc, jobs=args.jobs, latency_jobs=0,
                          idle_jobs=0, smoke=False, timeout=600, workdir=workdir)
    rows: dict[int, list[dict[str, float]]] = {86400: [], 0: []}
    try:
        for rep in range(args.reps):
            for ttl in ((86400, 0) if rep % 2 == 0 else (0, 86400)):  # alternate the order
                figures = one_drain(ctx, ttl)
                rows[ttl].append(figures)
                print(f"rep {rep + 1} RESULT_TTL={ttl:>5}: {figures['drain']:8,.0f} tasks/s  "
                      f"worker {figures['worker_cpu']:5.0f} us/task  "
                      f"redis {figures['redis_cpu']:5.0f} us/task  "
                      f"records left {int(figures['records']):,}", flush=True)
                time.sleep(0.5)
        mean, largest = record_memory(ctx)
    finally:
        procs.kill(redis_proc)
        shutil.rmtree(workdir, ignore_errors=True)
    on = {k: statistics.median(r[k] for r in rows[86400]) for k in ("drain", "worker_cpu",
                                                                   "redis_cpu")}
    off = {k: statistics.median(r[k] for r in rows[0]) for k in ("drain", "worker_cpu",
                                                                 "redis_cpu")}
    cost = 1 - on["drain"] / off["drain"]
    print()
    print(f"{args.jobs:,} no-op tasks, --concurrency 1, median of {args.reps}")
    print("| records | drain (tasks/s) | worker CPU (us/task) | Redis CPU (us/task) |")
    print("|---|---:|---:|---:|")
    print(f"| on (RESULT_TTL 86400) | {on['drain']:,.0f} | {on['worker_cpu']:.0f} | "
          f"{on['redis_cpu']:.0f} |")
    print(f"| off (RESULT_TTL 0) | {off['drain']:,.0f} | {off['worker_cpu']:.0f} | "
          f"{off['redis_cpu']:.0f} |")
    verdict = "met" if cost <= TARGET else "MISSED"
    print(f"records cost {100 * cost:.1f}% of the drain rate (target <= {100 * TARGET:.0f}%: "
          f"{verdict})")
    print(f"Redis memory per finished record: {mean:.0f} bytes on average, {largest} at most "
          f"(MEMORY USAGE of 1,000 records of a task returning a small dict)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
