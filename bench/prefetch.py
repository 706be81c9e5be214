"""Reads that grow with short tasks (`PREFETCH_MS`) against reads of `BATCH_SIZE` only.

    taskset -c 0,1 python bench/prefetch.py              # 20,000 no-op tasks, 5 reps
    python bench/prefetch.py --jobs 5000 --reps 2         # a quick look

Each repetition queues N no-op tasks (`dispatch_many`) and drains them with an
in-process burst `Worker` (the real fetcher, pool, acker and heartbeat; no scheduler),
once per configuration, alternating: `--concurrency` 1 and 8, each with the default
`PREFETCH_MS` (20) and with `PREFETCH_MS = 0` (every read is `BATCH_SIZE`, 10). The
worker runs on CPU 1, Redis on CPU 0. Printed per configuration: the worker process's
CPU per task (`time.process_time()`, every thread) and the read size the worker ended
with; then the medians and the CPU saved. Each drain must run every task exactly once.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from benchlib import procs  # noqa: E402

# (label, concurrency, prefetch_ms)
CONFIGS = [("-c1, reads of 10", 1, 0), ("-c1, PREFETCH_MS 20", 1, 20),
           ("-c8, reads of 10", 8, 0), ("-c8, PREFETCH_MS 20", 8, 20)]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="CI: 500 tasks, 1 rep")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.smoke:
        args.jobs, args.reps = 500, 1
    with procs.private_redis("bench-prefetch-") as (workdir, url, _):
        if procs.can_pin():
            procs.pin_self(procs.WORKER_CPU)
        os.environ.update(BENCH_REDIS_URL=url, DJANGO_SETTINGS_MODULE="djsite.settings",
                          BENCH_DB=str(Path(workdir) / "bench.sqlite3"))
        return measure(args)


def drain(jobs: int, concurrency: int, prefetch_ms: int) -> tuple[float, int]:
    """CPU seconds of one drain of `jobs` no-op tasks, and the read size it ended with."""
    from djsite.benchapp import tasks

    from django_taskrunner.runner import build_worker
    from django_taskrunner.store import get_store
    from django_taskrunner.worker.settings import worker_settings

    broker = get_store().streams
    broker.client.flushall()
    tasks.counted_runs.clear()
    tasks.counted.dispatch_many([{"i": i} for i in range(jobs)])
    worker = build_worker(broker, worker_settings(
        ["default"], concurrency=concurrency, batch_size=10, prefetch_ms=prefetch_ms,
        burst=True, scheduler=False))
    start = time.process_time()
    worker.run()
    cpu = time.process_time() - start
    seen, runs = len(tasks.counted_runs), set(tasks.counted_runs.values())
    if seen != jobs or runs != {1} or broker.pending("default"):
        raise SystemExit(f"not exactly once: {seen} of {jobs} tasks seen, run counts {runs}")
    return cpu, worker.prefetch.size


def measure(args: argparse.Namespace) -> int:
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", "--run-syncdb", verbosity=0)
    cpu: dict[str, list[float]] = {label: [] for label, _c, _p in CONFIGS}
    sizes: dict[str, int] = {}
    for rep in range(args.reps):
        order = CONFIGS if rep % 2 == 0 else CONFIGS[::-1]
        for label, concurrency, prefetch_ms in order:
            seconds, sizes[label] = drain(args.jobs, concurrency, prefetch_ms)
            cpu[label].append(seconds / args.jobs * 1e6)
            print(f"[{rep + 1}/{args.reps}] {label:22s} {cpu[label][-1]:6.1f} µs/task  "
                  f"read size at the end {sizes[label]}", file=sys.stderr, flush=True)
    print(f"{args.jobs:,} no-op tasks, in-process burst worker, median of {args.reps}")
    print("| configuration | worker CPU (µs/task) | min-max | read size at the end |")
    print("|---|---:|---|---:|")
    for label, _c, _p in CONFIGS:
        print(f"| {label} | {statistics.median(cpu[label]):.1f} | "
              f"{min(cpu[label]):.1f}-{max(cpu[label]):.1f} | {sizes[label]} |")
    for threads in ("-c1", "-c8"):
        fixed = statistics.median(cpu[f"{threads}, reads of 10"])
        grown = statistics.median(cpu[f"{threads}, PREFETCH_MS 20"])
        print(f"{threads}: reads that grow cost {grown / fixed:.2f}x the CPU per task of "
              f"reads of 10 ({fixed - grown:+.1f} µs saved)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
