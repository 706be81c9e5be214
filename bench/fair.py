"""Drain rate of a fair queue: no key, and 1, 100 and 100,000 distinct fair keys.

    taskset -c 0,1 python bench/fair.py                # 20,000 no-op tasks per case
    python bench/fair.py --smoke                        # a quick look (and the smoke test)

One process dispatches a backlog (dispatch_many, outside the timing), then drains it
with an in-process burst worker (4 threads, BATCH_SIZE 10), pinned to one CPU, against a
private `redis-server` pinned to the other. A case with K keys dispatches max(N, K)
tasks, spread evenly over the keys; "no key, fair" is a fair queue's tasks without a
key (one keyed task first makes the queue fair). The figure is the median over the
repetitions of microseconds per task (wall clock and the worker process's CPU), and its
ratio to the case without a key. Each case checks that every task ran exactly once and that no fair
list is left, and fails otherwise.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's package

from benchlib import procs  # noqa: E402

CHUNK = 1000
RAN: list[int] = []
RAN_LOCK = threading.Lock()


@functools.cache
def noop() -> Any:
    from django_taskrunner import task

    @task(name="bench.fair_noop", result_ttl=0, fair_key=lambda payload: payload.get("k"))
    def fair_noop(payload: Any) -> None:
        with RAN_LOCK:
            RAN.append(payload["i"])

    return fair_noop


def dispatch(n: int, keys: int) -> None:
    """`n` tasks over `keys` keys (0: no key; -1: no key but the first, which makes the
    queue fair, so the others wait as the turn of the tasks without a key), in batches
    of one key each."""
    task = noop()
    if keys <= 0:
        first = 0
        if keys < 0:
            task.dispatch({"i": 0, "k": "k0"})
            first = 1
        for start in range(first, n, CHUNK):
            task.dispatch_many([{"i": i} for i in range(start, min(n, start + CHUNK))])
        return
    per_key: dict[int, list[dict[str, Any]]] = {}
    for i in range(n):
        per_key.setdefault(i % keys, []).append({"i": i, "k": f"k{i % keys}"})
    for payloads in per_key.values():
        for start in range(0, len(payloads), CHUNK):
            task.dispatch_many(payloads[start:start + CHUNK])


def drain(n: int, keys: int) -> tuple[float, float]:
    """(wall, CPU) seconds to drain `n` tasks over `keys` keys; checks exactly once."""
    from django_taskrunner.store import get_store
    from django_taskrunner.store.connection import get_redis
    from django_taskrunner.worker.settings import worker_settings
    from django_taskrunner.worker.worker import Worker

    dispatch(n, keys)
    RAN.clear()
    worker = Worker(get_store().streams, worker_settings(("default",), concurrency=4, batch_size=10,
                                                  burst=True))
    began, cpu = time.perf_counter(), time.process_time()
    worker.run()
    wall, used = time.perf_counter() - began, time.process_time() - cpu
    if sorted(RAN) != list(range(n)):
        raise SystemExit(f"{keys} keys: {len(RAN)} runs of {n} tasks, "
                         f"{len(set(RAN))} distinct: not exactly once")
    if [key for key in get_redis().keys("*}:fair*") if b"}:fair-queue" not in key]:
        raise SystemExit(f"{keys} keys: fair lists left after the drain")
    return wall, used


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--smoke", action="store_true",
                        help="400 tasks, 1 repetition, 2,000 keys for the largest case")
    args = parser.parse_args(argv)
    n, reps, largest = (400, 1, 2000) if args.smoke else (args.n, args.reps, 100_000)
    cases = {"no key": 0, "no key, fair": -1, "1 key": 1, "100 keys": 100,
             f"{largest:,} keys": largest}
    with procs.private_redis("bench-fair-") as (workdir, url, _):
        procs.pin_self(procs.WORKER_CPU)
        os.environ.update(procs.child_env(url, BENCH_DB=str(Path(workdir) / "bench.sqlite3")))
        import logging

        import django

        django.setup()
        logging.getLogger("django_taskrunner").setLevel(logging.WARNING)
        from django_taskrunner.store.connection import get_redis

        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
        for _ in range(reps):
            for name, keys in cases.items():
                get_redis().flushall()
                tasks = max(n, keys)
                wall, cpu = drain(tasks, keys)
                figures[name].append((wall / tasks * 1e6, cpu / tasks * 1e6))

    def median(name: str, column: int) -> float:
        return statistics.median(values[column] for values in figures[name])

    base = [median("no key", column) for column in range(2)]
    print(f"median of {reps}, max({n:,}, keys) no-op tasks per case, burst worker of 4 "
          f"threads; µs per task (x: vs 'no key')")
    print(f"{'case':16} {'tasks/s':>9} {'wall':>14} {'worker CPU':>14}")
    for name in figures:
        cells = [f"{median(name, c):8.1f} {median(name, c) / base[c]:4.2f}x" for c in range(2)]
        rate = 1e6 / median(name, 0)
        print(f"{name:16} {rate:9.0f} {cells[0]:>14} {cells[1]:>14}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
