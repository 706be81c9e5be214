"""Rate and concurrency limits: what they cost per task, beside a plain task.

    taskset -c 0,1 python bench/limits.py                 # 5,000 tasks of each, 3 reps
    taskset -c 0,1 python bench/limits.py --concurrency 8 # eight worker threads
    python bench/limits.py --jobs 1000 --reps 1            # a quick look

Three no-op tasks side by side in one run: a plain one, one with `rate_limit`
("1000000/s": never refused, so only the check is measured) and one with
`concurrency_limit` (100,000 per key: never refused). For each, every repetition
queues `--jobs` tasks with `dispatch_many`, then drains them with a `Worker` in burst
mode and one thread (`--concurrency`), in this process (pinned to one CPU, Redis to the other), and
reads per task: Redis round trips (requests the client sent: a pipeline is one),
Redis commands (INFO commandstats, reset before the drain; a script's inner calls
count too) and the worker's CPU time. The kinds alternate order across repetitions;
the table holds the median of each figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import django  # noqa: E402
import redis  # noqa: E402
from benchlib import procs  # noqa: E402
from django.conf import settings  # noqa: E402

QUEUE = "bench-limits"
KINDS = ("plain", "rate", "concurrency")


class RoundTrips:
    """Counts the requests every client connection sends (a pipeline is one)."""

    count = 0

    @classmethod
    def install(cls) -> None:
        original = redis.connection.AbstractConnection.send_packed_command

        def counted(self: Any, command: Any, check_health: bool = True) -> None:
            cls.count += 1
            original(self, command, check_health)

        redis.connection.AbstractConnection.send_packed_command = counted  # type: ignore


def configure(url: str, workdir: str) -> None:
    settings.configure(
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth",
                        "django_taskrunner"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3",
                               "NAME": str(Path(workdir) / "bench.sqlite3")}},
        USE_TZ=True, TASKRUNNER={"REDIS_URL": url, "PREFIX": "bench"},
    )
    django.setup()


def declare() -> dict[str, Any]:
    from django_taskrunner import task

    def noop(payload: Any) -> None:
        return None

    return {
        "plain": task(name="bench.plain", queue=QUEUE)(noop),
        "rate": task(name="bench.rate", queue=QUEUE, rate_limit="1000000/s")(noop),
        "concurrency": task(name="bench.concurrency", queue=QUEUE,
                            concurrency_limit=100_000,
                            concurrency_key=lambda payload: str(payload["k"]))(noop),
    }


def commands(client: Any) -> int:
    return sum(int(stats["calls"]) for stats in client.info("commandstats").values())


def one_drain(client: Any, declared: Any, jobs: int, threads: int) -> dict[str, float]:
    from django_taskrunner.runner import build_worker
    from django_taskrunner.store import get_store
    from django_taskrunner.worker.settings import worker_settings

    client.flushall()
    for start in range(0, jobs, 1000):
        declared.dispatch_many([{"k": n % 10} for n in range(start, min(jobs, start + 1000))])
    worker = build_worker(get_store().streams, worker_settings(
        [QUEUE], concurrency=threads, burst=True, scheduler=False, batch_size=100))
    client.config_resetstat()
    trips, cpu, wall = RoundTrips.count, time.process_time(), time.perf_counter()
    worker.run()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    trips = RoundTrips.count - trips
    done = commands(client) - 1  # the INFO itself
    left = (client.xlen(get_store().streams.stream(QUEUE))
            + client.zcard(f"bench:{{{QUEUE}}}:delayed"))
    if left:
        raise SystemExit(f"{declared.name}: {left} tasks not drained")
    return {"trips": trips / jobs, "commands": done / jobs, "cpu_us": 1e6 * cpu / jobs,
            "rate": jobs / wall}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=1, help="worker threads")
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated subset")
    args = parser.parse_args(argv)
    kinds = tuple(kind for kind in KINDS if kind in args.kinds.split(","))
    with procs.private_redis("bench-limits-") as (workdir, url, _):
        procs.pin_self(procs.WORKER_CPU)
        configure(url, workdir)
        RoundTrips.install()
        tasks = declare()
        client = redis.Redis.from_url(url)
        rows: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
        for rep in range(args.reps):
            order = kinds if rep % 2 == 0 else tuple(reversed(kinds))
            for kind in order:
                figures = one_drain(client, tasks[kind], args.jobs, args.concurrency)
                rows[kind].append(figures)
                print(f"rep {rep + 1} {kind:>11}: {figures['trips']:5.2f} round trips/task  "
                      f"{figures['commands']:5.2f} commands/task  "
                      f"{figures['cpu_us']:6.0f} us CPU/task  {figures['rate']:7,.0f} tasks/s",
                      flush=True)
    median = {kind: {name: statistics.median(r[name] for r in rows[kind])
                     for name in ("trips", "commands", "cpu_us", "rate")} for kind in kinds}
    plain = median.get("plain", median[kinds[0]])
    print()
    print(f"{args.jobs:,} no-op tasks of each kind, {args.concurrency} worker thread(s), "
          f"median of {args.reps}")
    print("| task | round trips/task | Redis commands/task | worker CPU (us/task) | "
          "CPU vs plain | drain (tasks/s) |")
    print("|---|---:|---:|---:|---:|---:|")
    for kind in kinds:
        m = median[kind]
        print(f"| {kind} | {m['trips']:.2f} | {m['commands']:.2f} | {m['cpu_us']:.0f} | "
              f"{m['cpu_us'] / plain['cpu_us']:.2f}x | {m['rate']:,.0f} |")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "1")
    sys.exit(main(sys.argv[1:]))
