"""The cost of priorities when draining a queue: no priority vs levels in use.

    taskset -c 0,1 python bench/priorities.py             # 20,000 no-op tasks per case
    python bench/priorities.py --n 2000 --reps 1           # a quick look

One process dispatches a backlog (dispatch_many, outside the timing), then drains it
with an in-process burst worker (4 threads, BATCH_SIZE 10), pinned to one CPU, against a
private `redis-server` pinned to the other. The cases run one after the other in each
repetition, so a busy machine slows them alike; the figure is the median over the
repetitions of microseconds per task (wall clock and the worker process's CPU), and its
ratio to the first case:

- `no priority`: the queue's one stream, as before priorities existed;
- `one level (9)`: every task at priority 9: the level's stream, and the queue's own
  stream read (empty) below it;
- `three levels (1, 5, 9)`: a third of the tasks on each: each batch read level by level.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's package

from benchlib import procs  # noqa: E402

CASES = {"no priority": (None,), "one level (9)": (9,), "three levels (1, 5, 9)": (1, 5, 9)}
CHUNK = 1000


@functools.cache
def noop() -> Any:
    from django_taskrunner import task

    @task(name="bench.prio_noop", result_ttl=0)
    def prio_noop(payload: Any) -> None:
        pass

    return prio_noop


def drain(n: int, levels: tuple[int | None, ...]) -> tuple[float, float]:
    """(wall, CPU) seconds to drain `n` tasks spread over `levels`."""
    from django_taskrunner.runner import build_worker
    from django_taskrunner.store import get_store
    from django_taskrunner.worker.settings import worker_settings

    task = noop()
    for start in range(0, n, CHUNK):
        size = min(CHUNK, n - start)
        for index, level in enumerate(levels):
            share = size // len(levels) + (1 if index < size % len(levels) else 0)
            task.dispatch_many([{"i": i} for i in range(share)], priority=level)
    settings = worker_settings(("default",), concurrency=4, batch_size=10, burst=True)
    worker = build_worker(get_store().streams, settings)
    began, cpu = time.perf_counter(), time.process_time()
    worker.run()
    return time.perf_counter() - began, time.process_time() - cpu


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    with procs.private_redis("bench-priorities-") as (workdir, url, _):
        procs.pin_self(procs.WORKER_CPU)
        os.environ.update(procs.child_env(url, BENCH_DB=str(Path(workdir) / "bench.sqlite3")))
        import logging

        import django

        django.setup()
        logging.getLogger("django_taskrunner").setLevel(logging.WARNING)
        from django_taskrunner.store.connection import get_redis

        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in CASES}
        for _ in range(args.reps):
            for name, levels in CASES.items():
                get_redis().flushall()
                wall, cpu = drain(args.n, levels)
                figures[name].append((wall / args.n * 1e6, cpu / args.n * 1e6))

    def median(name: str, column: int) -> float:
        return statistics.median(values[column] for values in figures[name])

    base = [median("no priority", column) for column in range(2)]
    print(f"median of {args.reps}, {args.n:,} no-op tasks per case, burst worker of 4 "
          f"threads; µs per task (x: vs 'no priority')")
    print(f"{'case':24} {'wall':>14} {'worker CPU':>14}")
    for name in figures:
        cells = [f"{median(name, c):8.1f} {median(name, c) / base[c]:4.2f}x" for c in range(2)]
        print(f"{name:24} {cells[0]:>14} {cells[1]:>14}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
