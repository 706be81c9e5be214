"""What one of the acker's flushes costs the worker's CPU, by how many tasks it carries,
beside a plain redis-py round trip: the part of a task's cost that only fuller batches
(or fewer round trips) can cut.

    taskset -c 0,1 python bench/flush_cost.py            # --sizes 1,7,30,100 --flushes 300
    python bench/flush_cost.py --flushes 20               # the smoke run

A worker acks the tasks that finished meanwhile in one round trip (`Acker.flush`: the acks,
the deletes and the final records). When tasks finish quickly the batches are full (100 a
flush), and the round trip's own cost is spread over many; when each task takes about a
millisecond (`bench/orm.py`), a flush carries a handful, and the round trip itself is a
good part of what each task costs the worker.

It starts its own redis-server and pins itself to the worker's CPU. For each size it
queues and reads `size * flushes` messages of the benchmark site's no-op task, runs them
through `Executor.handle()` (one batch of acks and records per `size` tasks, collected
without an acker thread), then times each batch's `Acker.flush` on this thread
(`time.thread_time()`, so the wait for Redis' reply is not counted, its system calls are).
Beside them, a redis-py `PING` (a command and its reply, nothing else) timed the same
way. Every message must be acked, or the script fails. The fixed part and the part per
task are a least-squares line through the sizes' medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from benchlib import procs  # noqa: E402
from benchlib.queued import queued_and_read  # noqa: E402


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,7,30,100",
                        help="tasks per flush, comma-separated (default 1,7,30,100)")
    parser.add_argument("--flushes", type=int, default=300, help="flushes of each size")
    args = parser.parse_args(argv)
    args.sizes = [int(size) for size in args.sizes.split(",")]
    if args.flushes < 1 or not args.sizes or min(args.sizes) < 1:
        parser.error("--flushes and every size must be at least 1")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    with procs.private_redis("bench-flush-") as (workdir, url, _):
        procs.pin_self(procs.WORKER_CPU)
        os.environ.update(DJANGO_SETTINGS_MODULE="djsite.settings", BENCH_REDIS_URL=url,
                          BENCH_DB=str(Path(workdir) / "bench.sqlite3"))
        return measure(args)


class Collected:
    """What `Executor.handle()` hands the acker, kept as one batch per flush."""

    def __init__(self) -> None:
        self.batch: Any = None
        self.start_batch()

    def start_batch(self) -> None:
        from django_taskrunner.worker.acker import Batch

        self.batch = Batch()

    def ack(self, shard: str, stream_id: str) -> None:
        self.batch.acks[shard].append(stream_id)
        self.batch.size += 1

    def record(self, write: Any) -> None:
        self.batch.records.append(write)


def batches_of(size: int, flushes: int, task: Any) -> list[Any]:
    """`flushes` batches of `size` finished tasks each, as the acker would get them."""
    from django_taskrunner.conf import get_settings
    from django_taskrunner.store import get_store
    from django_taskrunner.worker.executor import Executor
    from django_taskrunner.worker.fetcher import Delivery

    broker, consumer = get_store().streams, "bench-flush-1"
    queue = task.options.queue or get_settings().DEFAULT_QUEUE
    broker.client.flushall()
    entries = queued_and_read(task, [{"i": i} for i in range(size * flushes)], queue, consumer)
    collected = Collected()
    executor = Executor(broker, consumer, collected.ack, record=collected.record)
    batches = []
    for start in range(0, len(entries), size):
        collected.start_batch()
        for stream_id, body in entries[start:start + size]:
            executor.handle(Delivery(queue, stream_id, body))
        batches.append(collected.batch)
    return batches


def flush_costs(batches: list[Any]) -> list[float]:
    """µs of this thread's CPU for each batch's flush; fails unless all were acked."""
    from django_taskrunner.store import get_store
    from django_taskrunner.worker.acker import Acker

    broker = get_store().streams
    acker = Acker(broker, "bench-flush-1")
    costs = []
    for batch in batches:
        start = time.thread_time()
        acker.flush(batch)
        costs.append((time.thread_time() - start) * 1e6)
    queue = next(iter(batches[0].acks))
    if broker.pending(queue):
        raise SystemExit(f"{broker.pending(queue)} messages were not acked")
    return costs


def ping_costs(count: int) -> list[float]:
    """µs of this thread's CPU for each of `count` redis-py PINGs on the store's client."""
    from django_taskrunner.store import get_store

    client = get_store().streams.client
    client.ping()
    costs = []
    for _ in range(count):
        start = time.thread_time()
        client.ping()
        costs.append((time.thread_time() - start) * 1e6)
    return costs


def line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(fixed µs, µs per task) of the least-squares line through (size, µs) points."""
    if len(points) < 2:
        return points[0][1], 0.0
    slope, intercept = statistics.linear_regression([float(n) for n, _ in points],
                                                    [cost for _, cost in points])
    return intercept, slope


def measure(args: argparse.Namespace) -> int:
    import django

    django.setup()
    from django.core.management import call_command
    from djsite.benchapp import tasks

    call_command("migrate", "--run-syncdb", verbosity=0)
    ping = statistics.median(ping_costs(args.flushes))
    print(f"redis-py PING: {ping:.0f} µs CPU a round trip (median of {args.flushes})")
    points = []
    for size in args.sizes:
        costs = flush_costs(batches_of(size, args.flushes, tasks.noop))
        cost = statistics.median(costs)
        points.append((size, cost))
        print(f"flush of {size:>3} task(s): {cost:6.0f} µs CPU ({cost / size:5.1f} a task; "
              f"{min(costs):.0f}-{max(costs):.0f}; {args.flushes} flushes)")
    fixed, per_task = line(points)
    print(f"fit: {fixed:.0f} µs a flush + {per_task:.1f} µs a task "
          f"(the fixed part {fixed / ping:.2f}× a PING)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
