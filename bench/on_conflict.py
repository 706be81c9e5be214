"""The cost of a unique dispatch under each on_conflict policy and debounce.

    taskset -c 0,1 python bench/on_conflict.py               # 20,000 dispatches per case
    python bench/on_conflict.py --n 2000 --reps 1             # a quick look

One process dispatches, pinned to one CPU, against a private `redis-server` pinned to the
other. Every case is one EVALSHA of `enqueue.lua` (one round trip); what differs is the
work in the script and in Python. The cases run in turns of 1,000 dispatches, one after
the other, so a busy machine slows them alike; the figure is the median over the
repetitions of microseconds per dispatch (wall clock, the dispatching process's CPU, and
Redis's CPU in EVALSHA from INFO commandstats), and its ratio to the first case:

- `unique, lock free`: a fresh key per dispatch, the lock taken and the message added;
- `raise, lock held`: the key's lock held, TaskAlreadyDispatched raised and caught;
- `return, queued holder`: the holder's body read back (XRANGE) and decoded;
- `replace, queued holder`: XRANGE, XINFO GROUPS, XDEL and XADD of the rebuilt body;
- `replace, delayed holder`: ZSCORE, ZREM and ZADD in the delayed set;
- `debounce, waiting holder`: as the delayed replace, with a new score and the lock renewed.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's package

from benchlib import procs  # noqa: E402

TURN = 1000


@functools.cache
def tasks() -> tuple[Any, Any]:
    """The two tasks the cases dispatch, declared once."""
    from django_taskrunner import task

    @task(name="bench.unique", unique=True, unique_for=3600,
          unique_key=lambda payload: str(payload["k"]), result_ttl=0)
    def unique(payload: Any) -> None:
        pass

    @task(name="bench.debounced", unique_mode="debounce", debounce=3600,
          unique_key=lambda payload: str(payload["k"]), result_ttl=0)
    def debounced(payload: Any) -> None:
        pass

    return unique, debounced


def cases() -> list[tuple[str, Callable[[int], None]]]:
    """(name, dispatch number i) for each case, with what each needs already in place."""
    from django_taskrunner import TaskAlreadyDispatched

    unique, debounced = tasks()
    unique.dispatch({"k": "queued"})
    unique.dispatch_delayed({"k": "delayed"}, delay=3600)
    debounced.dispatch({"k": "waiting"})
    fresh = iter(range(10**9))

    def raised(i: int) -> None:
        try:
            unique.dispatch({"k": "queued", "i": i})
        except TaskAlreadyDispatched:
            pass

    return [
        ("unique, lock free", lambda i: unique.dispatch({"k": f"f{next(fresh)}", "i": i})),
        ("raise, lock held", raised),
        ("return, queued holder",
         lambda i: unique.dispatch({"k": "queued", "i": i}, on_conflict="return")),
        ("replace, queued holder",
         lambda i: unique.dispatch({"k": "queued", "i": i}, on_conflict="replace")),
        ("replace, delayed holder",
         lambda i: unique.dispatch({"k": "delayed", "i": i}, on_conflict="replace")),
        ("debounce, waiting holder", lambda i: debounced.dispatch({"k": "waiting", "i": i})),
    ]


def script_usec(client: Any) -> float:
    """Microseconds Redis has spent in EVALSHA so far (INFO commandstats)."""
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return float(stats.get("usec", 0))


def run(n: int, client: Any) -> dict[str, tuple[float, float, float]]:
    """(wall, dispatcher CPU, Redis CPU) microseconds per dispatch of each case, `n`
    dispatches each, in turns."""
    named = cases()
    spent = {name: [0.0, 0.0, 0.0] for name, _ in named}
    for start in range(0, n, TURN):
        for name, call in named:
            redis_before = script_usec(client)
            began, cpu = time.perf_counter(), time.process_time()
            for i in range(start, min(n, start + TURN)):
                call(i)
            totals = spent[name]
            totals[0] += time.perf_counter() - began
            totals[1] += time.process_time() - cpu
            totals[2] += (script_usec(client) - redis_before) / 1e6
    return {name: (wall / n * 1e6, cpu / n * 1e6, server / n * 1e6)
            for name, (wall, cpu, server) in spent.items()}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    with procs.private_redis("bench-on-conflict-") as (workdir, url, _):
        procs.pin_self(procs.WORKER_CPU)
        os.environ.update(procs.child_env(url, BENCH_DB=str(Path(workdir) / "bench.sqlite3")))
        import django

        django.setup()
        from django_taskrunner.store.connection import get_redis

        figures: dict[str, list[tuple[float, float, float]]] = {}
        for _ in range(args.reps):
            get_redis().flushall()
            for name, micros in run(args.n, get_redis()).items():
                figures.setdefault(name, []).append(micros)

    def median(name: str, column: int) -> float:
        return statistics.median(values[column] for values in figures[name])

    base = [median("unique, lock free", column) for column in range(3)]
    print(f"median of {args.reps}, {args.n:,} dispatches per case; µs per dispatch "
          f"(x: vs 'unique, lock free')")
    print(f"{'case':26} {'wall':>14} {'dispatcher CPU':>16} {'Redis CPU':>14}")
    for name in figures:
        cells = [f"{median(name, c):8.1f} {median(name, c) / base[c]:4.2f}x" for c in range(3)]
        print(f"{name:26} {cells[0]:>14} {cells[1]:>16} {cells[2]:>14}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
