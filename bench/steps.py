"""What durable steps cost: a task context without steps (the Steps object a worker
builds per attempt, never touching Redis), and one `ctx.step` (its Redis commands and
wall time per step) on a local Redis: the first step of a task id's first run (one
pipelined write: HSET + EXPIRE, one round trip), the first step of a later run with
nothing kept (a read, then the write: two round trips), a step already kept (the read).

    python bench/steps.py             # --steps 2000
    python bench/steps.py --smoke     # 50 steps: figures only
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.records_scale import start_redis  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--smoke", action="store_true", help="50 steps: figures only")
    options = parser.parse_args()
    count = 50 if options.smoke else options.steps
    proc, url = start_redis(tempfile.mkdtemp(prefix="tr-steps-"))
    try:
        import redis

        from django_taskrunner.core.context import stored_steps
        from django_taskrunner.store import Store

        client = redis.Redis.from_url(url)
        store = Store(client, "bench")
        week = 7 * 86400

        def steps(task_id: str, first: bool):
            return stored_steps(store, task_id, "t", week, first_run=first)

        build = measure(lambda i: steps(f"t{i}", True), count)
        print(f"no step: {build:.2f} µs per attempt (a Steps object; 0 round trips)")
        for label, prefix, first in (("first run of its task id", "f", True),
                                     ("a later run, nothing kept", "l", False)):
            before = calls(client)
            took = measure(lambda i, prefix=prefix, first=first: steps(f"{prefix}{i}", first)
                           .run("charge", lambda: {"id": i}, (), {}), count)
            trips = (calls(client) - before - 1) / count
            print(f"first step, not kept yet, {label}: {took:.2f} µs, "
                  f"{trips:.1f} Redis commands per step")
        before = calls(client)
        kept = measure(lambda i: steps(f"f{i}", False).run("charge", lambda: {"id": i}, (), {}),
                       count)
        trips = (calls(client) - before - 1) / count
        print(f"step already kept (a later run): {kept:.2f} µs, {trips:.1f} Redis commands "
              f"(the attempt's one read)")
    finally:
        proc.terminate()
        proc.wait(10)


def calls(client) -> int:
    stats = client.info("commandstats")
    return sum(value["calls"] for value in stats.values())


def measure(fn, count: int) -> float:
    started = time.perf_counter()
    for i in range(count):
        fn(i)
    return (time.perf_counter() - started) / count * 1e6


if __name__ == "__main__":
    main()
