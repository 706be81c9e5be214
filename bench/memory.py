"""Memory of one `runtasks` process draining a long queue (bounded prefetch).

    python bench/memory.py --jobs 1000000     # the target: peak RSS under 150 MB
    python bench/memory.py --smoke            # 20,000 tasks

Queues N tasks with `dispatch_many`, starts one worker (pinned like in peers.py) and
samples its resident memory every 100 ms until the N-th task has run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import job, measure, procs  # noqa: E402
from benchlib.systems import BY_KEY, worker_argv  # noqa: E402

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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--concurrency", default="8")
    parser.add_argument("--smoke", action="store_true", help="20,000 tasks")
    args = parser.parse_args(argv)
    jobs = 20_000 if args.smoke else args.jobs
    procs.pin_self(procs.LOAD_CPU)
    workdir = tempfile.mkdtemp(prefix="bench-memory-")
    os.environ["BENCH_DB"] = str(Path(workdir) / "bench.sqlite3")
    redis_proc, url = procs.start_redis(workdir)
    ctx = measure.Context(url=url, redis_proc=redis_proc, jobs=jobs, latency_jobs=0,
                          idle_jobs=0, smoke=False, timeout=max(120.0, jobs / 1000),
                          workdir=workdir)
    try:
        seconds = measure.produce(ctx, "taskrunner", "many", jobs)
        print(f"queued {jobs:,} tasks in {seconds:.1f}s", flush=True)
        peak, first, drained = drain_sampling_rss(ctx, args.concurrency)
    except measure.BenchError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        procs.kill(redis_proc)
        shutil.rmtree(workdir, ignore_errors=True)
    verdict = "met" if peak < LIMIT_MB else "MISSED"
    print(f"runtasks --concurrency {args.concurrency}: drained {jobs:,} tasks in {drained:.1f}s; "
          f"RSS {first:.0f} MB after the first task, peak {peak:.0f} MB "
          f"(target < {LIMIT_MB} MB: {verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
