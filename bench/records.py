"""Task records: what they cost the worker, and what one costs Redis.

    taskset -c 0,1 python bench/records.py               # 20,000 no-op tasks, 3 reps
    python bench/records.py --jobs 5000 --reps 1          # a quick look
    python bench/records.py --concurrency 8               # runtasks' default pool

Each repetition drains the same number of no-op tasks (`dispatch_many`, then
`runtasks --concurrency 1`, or `--concurrency N`, pinned to its own CPU, Redis and the
producer on the other, as peers.py) three times, side by side: with records
(`RESULT_TTL` = 1 day, the default, and the finished index of the admin's Tasks page,
`FINISHED_LIST_SIZE` 10,000), with records but no index (`FINISHED_LIST_SIZE = 0`), and
without records (`RESULT_TTL = 0`: nothing is written at all). It prints the drain rate
and the worker's CPU per task of each, their median over the repetitions and the cost of
records in drain rate (target: at most 15%). Then it dispatches and runs 1,000 tasks
that return a small dict and reads `MEMORY USAGE` of their finished records and of the
queue's finished index: bytes per record in Redis, with its index entry.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import measure, procs  # noqa: E402
from benchlib.systems import TASKRUNNER_WORKER  # noqa: E402

TARGET = 0.15
# RESULT_TTL and FINISHED_LIST_SIZE of each mode
MODES = {"on": ("86400", "10000"), "no index": ("86400", "0"), "off": ("0", "0")}


def one_drain(ctx: measure.Context, mode: str, concurrency: int) -> dict[str, float]:
    """Queue `ctx.jobs` no-op tasks and drain them with one pinned worker."""
    ctx.client.flushall()
    ttl, size = MODES[mode]
    env = procs.child_env(ctx.url, BENCH_RESULT_TTL=ttl, BENCH_FINISHED_LIST_SIZE=size)
    os.environ["BENCH_RESULT_TTL"] = ttl  # the producer dispatches with it too
    os.environ["BENCH_FINISHED_LIST_SIZE"] = size
    measure.produce(ctx, "taskrunner", "many", ctx.jobs)
    worker = procs.spawn(procs.python(*TASKRUNNER_WORKER, "--concurrency", str(concurrency)),
                         cpu=procs.WORKER_CPU, env=env)
    try:
        figures, _cut = measure.drain(ctx, worker)
    finally:
        procs.kill(worker)
    records = sum(1 for _ in ctx.client.scan_iter("bench:record:*", count=1000))
    return {**figures, "records": records}


def record_memory(ctx: measure.Context, n: int = 1000) -> tuple[float, int, float]:
    """Mean and largest MEMORY USAGE of `n` finished records (tasks returning a dict),
    and that of their queue's finished index per id it lists."""
    ctx.client.flushall()
    os.environ["BENCH_RESULT_TTL"] = "86400"
    os.environ["BENCH_FINISHED_LIST_SIZE"] = "10000"
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
    index = "bench:{default}:finished"
    listed = int(ctx.client.zcard(index))
    if listed != n:
        raise SystemExit(f"expected {n} ids in the finished index, found {listed}")
    per_id = int(ctx.client.memory_usage(index, samples=0) or 0) / listed
    return statistics.mean(sizes), max(sizes), per_id


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=1,
                        help="the worker's pool threads (runtasks' default is 8)")
    args = parser.parse_args(argv)
    procs.pin_self(procs.LOAD_CPU)
    rows: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    with procs.private_redis("bench-records-") as (workdir, url, redis_proc):
        os.environ["BENCH_DB"] = str(Path(workdir) / "bench.sqlite3")
        ctx = measure.Context(url=url, redis_proc=redis_proc, jobs=args.jobs, latency_jobs=0,
                              idle_jobs=0, smoke=False, timeout=600, workdir=workdir)
        for rep in range(args.reps):
            order = list(MODES)[rep % len(MODES):] + list(MODES)[:rep % len(MODES)]
            for mode in order:  # each mode first in turn
                figures = one_drain(ctx, mode, args.concurrency)
                rows[mode].append(figures)
                print(f"rep {rep + 1} records {mode:>8}: {figures['drain']:8,.0f} tasks/s  "
                      f"worker {figures['worker_cpu']:5.0f} us/task  "
                      f"redis {figures['redis_cpu']:5.0f} us/task  "
                      f"records left {int(figures['records']):,}", flush=True)
                time.sleep(0.5)
        mean, largest, per_id = record_memory(ctx)
    report(args, rows, mean, largest, per_id)
    return 0


def report(args: argparse.Namespace, rows: dict[str, list[dict[str, float]]], mean: float,
           largest: int, per_id: float) -> None:
    """The medians of each mode, the cost of records, the memory per record."""
    medians = {mode: {k: statistics.median(r[k] for r in runs)
                      for k in ("drain", "worker_cpu", "redis_cpu")}
               for mode, runs in rows.items()}
    print()
    print(f"{args.jobs:,} no-op tasks, --concurrency {args.concurrency}, median of {args.reps}")
    print("| records | drain (tasks/s) | worker CPU (us/task) | Redis CPU (us/task) |")
    print("|---|---:|---:|---:|")
    names = {"on": "on, with the finished index (RESULT_TTL 86400, FINISHED_LIST_SIZE 10000)",
             "no index": "on, no finished index (FINISHED_LIST_SIZE 0)",
             "off": "off (RESULT_TTL 0)"}
    for mode, figures in medians.items():
        print(f"| {names[mode]} | {figures['drain']:,.0f} | {figures['worker_cpu']:.0f} | "
              f"{figures['redis_cpu']:.0f} |")
    for mode in ("on", "no index"):
        cost = 1 - medians[mode]["drain"] / medians["off"]["drain"]
        paired = [1 - r["drain"] / off["drain"] for r, off in zip(rows[mode], rows["off"],
                                                                   strict=True)]
        verdict = "met" if cost <= TARGET else "MISSED"
        print(f"records {mode}: cost {100 * cost:.1f}% of the drain rate "
              f"(target <= {100 * TARGET:.0f}%: {verdict}); rep by rep (÷ the same rep's "
              f"off) {' / '.join(f'{100 * c:.1f}' for c in paired)}%, median "
              f"{100 * statistics.median(paired):.1f}%")
    print(f"Redis memory per finished record: {mean:.0f} bytes on average, {largest} at most "
          f"(MEMORY USAGE of 1,000 records of a task returning a small dict), plus "
          f"{per_id:.0f} bytes per id in the finished index: {mean + per_id:.0f} in all")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
