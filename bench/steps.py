"""What durable steps cost: a task context without steps (the Steps object a worker
builds per attempt, never touching Redis), and one `ctx.step` (its round trips and
wall time per step) on a local Redis.

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

        from django_taskrunner.core.steps import stored_steps

        client = redis.Redis.from_url(url)
        build = measure(lambda i: stored_steps(client, "bench", f"t{i}", "t", 7 * 86400), count)
        before = calls(client)
        per_step = measure(lambda i: stored_steps(client, "bench", f"s{i}", "t", 7 * 86400)
                           .run("charge", lambda: {"id": i}, (), {}), count)
        trips = (calls(client) - before - 1) / count
        print(f"no step: {build:.2f} µs per attempt (a Steps object; 0 round trips)")
        print(f"one step, first run: {per_step:.2f} µs, {trips:.1f} Redis commands "
              f"(1 read + 1 pipelined write: 2 round trips, the read once per attempt)")
        kept = measure(lambda i: stored_steps(client, "bench", f"s{i}", "t", 7 * 86400)
                       .run("charge", lambda: {"id": i}, (), {}), count)
        print(f"one step, kept result: {kept:.2f} µs (1 round trip, the read)")
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
