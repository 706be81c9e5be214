"""Memory of one `runtasks` process, idle and draining a long queue (bounded prefetch).

    python bench/memory.py --jobs 1000000                  # the target: peak RSS under 150 MB
    python bench/memory.py --sizes 10000,100000,1000000    # 1x, 10x, 100x: one table
    python bench/memory.py --smoke                         # 2,000 and 20,000 tasks

For each size: one worker (pinned like in peers.py) started on an empty queue, its
resident memory once it has read the queue and run `--settle` s (idle); then N tasks
queued with `dispatch_many`, a fresh worker, and its resident memory sampled every
100 ms until the N-th task has run. With --smoke every task is numbered and must have
run exactly once.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchlib import job, measure, procs  # noqa: E402
from benchlib.systems import BY_KEY, worker_argv  # noqa: E402

from bench.growth import markdown  # noqa: E402

LIMIT_MB = 150


def drain_sampling_rss(ctx: measure.Context, concurrency: str) -> tuple[float, float, float]:
    """(peak MB, MB after the first task, seconds) while one worker drains the queue."""
    system = BY_KEY["taskrunner"]
    argv = [*worker_argv(system)[:-1], concurrency]
    with open(f"{ctx.workdir}/memory-worker.log", "wb") as log:
        worker = procs.spawn(argv, cpu=procs.WORKER_CPU, env=procs.child_env(ctx.url),
                             stdout=log.fileno())
    client, peak, first_mb = ctx.client, 0.0, 0.0
    started = time.monotonic()
    try:
        while True:
            rss = procs.rss_bytes(worker.pid) / 2**20
            peak = max(peak, rss)
            done = int(client.get(job.DONE) or 0)
            if done and not first_mb:
                first_mb = rss
            if done >= ctx.jobs:
                return peak, first_mb, time.monotonic() - started
            if worker.poll() is not None or time.monotonic() - started > ctx.timeout:
                raise measure.BenchError(f"worker stopped or timed out at {done} of {ctx.jobs}")
            time.sleep(0.1)
    finally:
        procs.kill(worker)


def idle_rss(ctx: measure.Context, concurrency: str, settle: float) -> float:
    """MB of a worker that has read its empty queue and then waited `settle` s."""
    system = BY_KEY["taskrunner"]
    argv = [*worker_argv(system)[:-1], concurrency]
    worker = procs.spawn(argv, cpu=procs.WORKER_CPU, env=procs.child_env(ctx.url))
    try:
        deadline = time.monotonic() + 60
        while not any(ctx.client.xinfo_groups(key) for key in ctx.client.scan_iter("*:stream")):
            if worker.poll() is not None or time.monotonic() > deadline:
                raise measure.BenchError("the idle worker did not start reading")
            time.sleep(0.1)
        time.sleep(settle)
        return procs.rss_bytes(worker.pid) / 2**20
    finally:
        procs.kill(worker)


def one_size(ctx: measure.Context, args: argparse.Namespace) -> list[str]:
    """The table row of `ctx.jobs` queued tasks."""
    ctx.client.flushall()
    idle = idle_rss(ctx, args.concurrency, args.settle)
    ctx.client.flushall()
    seconds = measure.produce(ctx, "taskrunner", "many", ctx.jobs)
    print(f"queued {ctx.jobs:,} tasks in {seconds:.1f}s", file=sys.stderr, flush=True)
    peak, first, drained = drain_sampling_rss(ctx, args.concurrency)
    if ctx.smoke:
        measure.check_exactly_once(ctx, BY_KEY["taskrunner"])
    return [f"{ctx.jobs:,}", f"{idle:.0f}", f"{first:.0f}", f"{peak:.0f}",
            f"{drained:,.0f} s ({ctx.jobs / drained:,.0f}/s)",
            "met" if peak < LIMIT_MB else "**missed**"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000, help="one size")
    parser.add_argument("--sizes", help="comma-separated sizes, one table row each")
    parser.add_argument("--concurrency", default="8")
    parser.add_argument("--settle", type=float, default=5.0,
                        help="seconds an idle worker runs before its RSS is read")
    parser.add_argument("--smoke", action="store_true", help="2,000 and 20,000 numbered tasks")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in (args.sizes or str(args.jobs)).split(",")]
    if args.smoke:
        sizes, args.settle = [2000, 20_000], 1.0
    procs.pin_self(procs.LOAD_CPU)
    rows = []
    with procs.private_redis("bench-memory-") as (workdir, url, redis_proc):
        os.environ["BENCH_DB"] = str(Path(workdir) / "bench.sqlite3")
        try:
            for size in sizes:
                ctx = measure.Context(url=url, redis_proc=redis_proc, jobs=size, latency_jobs=0,
                                      idle_jobs=0, smoke=args.smoke,
                                      timeout=max(120.0, size / 1000), workdir=workdir)
                rows.append(one_size(ctx, args))
                print(" | ".join(rows[-1]), f"(load {os.getloadavg()[0]:.1f})",
                      file=sys.stderr, flush=True)
        except measure.BenchError as exc:
            print(f"FAILED: {exc}", file=sys.stderr)
            return 1
    print(markdown([f"queued tasks (runtasks --concurrency {args.concurrency})", "RSS idle MB",
                    "RSS after the first task MB", "peak RSS MB", "drained in",
                    f"peak < {LIMIT_MB} MB"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
