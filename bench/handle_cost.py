"""The runner's own CPU per task, in one process: `Executor.handle()` and the acker's
batched round trips, against calling the same task function in a plain loop.

    taskset -c 0,1 python bench/handle_cost.py            # --jobs 3000 --reps 5
    python bench/handle_cost.py --job noop                 # a task that does nothing
    python bench/handle_cost.py --job noop --profile out.prof   # and where its time goes
    python bench/handle_cost.py --job noop --worker-loop   # the worker's loop around it too
    PYTHONPATH=<other checkout> python bench/handle_cost.py   # that checkout's package

Starts a private redis-server (and, for `--job orm`, a PostgreSQL database of its own,
`CONN_MAX_AGE` 600), queues N messages of the task with `dispatch_many` and reads them
with XREADGROUP as a worker would; then, alternating, runs the task function N times in a
loop and `Executor.handle()` on the N messages (the worker's own Acker thread sending the
acks and task records). CPU is `time.process_time()` of this process (every thread),
from the first task to the last ack sent, split into the executing thread's and the
acker thread's (with the acker's flushes: how many, tasks each, CPU each); for the ORM
job also the median of each repetition's own cost. The fetcher, the heartbeat and the
monitor are left out: what this measures is the per-task path the optimisations touch,
with far less noise than a drain on a shared machine.

`--worker-loop` runs the messages through the worker's own loop instead, on one thread:
a `Worker` (not started) takes them 100 at a time as its fetcher hands a read over
(`Worker.accept`: the deliveries, the held set, the pool's inbox), then each message as
a pool thread does (`Worker._run_item`: the outage and pause checks, `Executor.handle()`,
`_release`), with the worker's acker, statistics and heartbeat listener (whose list of
starts the heartbeat's look empties after each read, as its thread would); what it adds
to the plain run is the loop's own cost, without the threads' hand-offs.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from benchlib import procs  # noqa: E402
from benchlib.queued import queued_and_read  # noqa: E402


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--job", choices=["orm", "noop"], default="orm")
    parser.add_argument("--conn-max-age", default="600", help="CONN_MAX_AGE (unset: none)")
    parser.add_argument("--profile", metavar="FILE",
                        help="write cProfile stats of the Executor.handle loop to FILE "
                             "(read them with python -m pstats FILE)")
    parser.add_argument("--worker-loop", action="store_true",
                        help="run each message through the worker's own loop "
                             "(Worker.accept, Worker._run_item), not Executor.handle alone")
    parser.add_argument("--pg-name", default="tr_perf_handle")
    parser.add_argument("--pg-host", default="127.0.0.1")
    parser.add_argument("--pg-port", default="5432")
    parser.add_argument("--pg-user", default="postgres")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    import psycopg

    dsn = f"host={args.pg_host} port={args.pg_port} user={args.pg_user} dbname=postgres"
    env = {"DJANGO_SETTINGS_MODULE": "djsite.settings"}
    if args.job == "orm":
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{args.pg_name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{args.pg_name}"')
        env.update(BENCH_PG_NAME=args.pg_name, BENCH_PG_HOST=args.pg_host,
                   BENCH_PG_PORT=args.pg_port, BENCH_PG_USER=args.pg_user)
        if args.conn_max_age != "unset":
            env["BENCH_CONN_MAX_AGE"] = args.conn_max_age
    try:
        with procs.private_redis("bench-handle-") as (workdir, url, _):
            procs.pin_self(procs.WORKER_CPU)
            os.environ.update(env, BENCH_REDIS_URL=url,
                              BENCH_DB=str(Path(workdir) / "bench.sqlite3"))
            return measure(args)
    finally:  # the database last, once the server and its folder are gone
        if args.job == "orm":
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{args.pg_name}" WITH (FORCE)')


class Split:
    """One repetition's CPU: the task function in a loop, and `Executor.handle()` with the
    acker, split into this (the executing) thread and the acker's thread, with the
    acker's flushes (how many, how many tasks each, the CPU inside them)."""

    def __init__(self) -> None:
        self.loop_s = self.handle_s = self.executor_s = self.acker_s = 0.0
        self.flushes = self.flushed = 0
        self.flush_s = 0.0

    def count_flushes(self, acker: Any) -> None:
        """Wrap `acker.flush` (called on the acker's thread) to count and time each."""
        flush = acker.flush

        def counted(batch: Any) -> bool:
            start = time.thread_time()
            try:
                return flush(batch)
            finally:
                self.flush_s += time.thread_time() - start
                self.flushes += 1
                self.flushed += batch.size

        acker.flush = counted


def handle_all(args: argparse.Namespace, run_all: Callable[[], None], acker: Any,
               split: Split) -> None:
    """`run_all()` (every delivery through `Executor.handle()`, or the worker's loop),
    timed until the acker sent the last ack."""
    acker_clock = time.pthread_getcpuclockid(acker.ident)
    start, own, acker_start = (time.process_time(), time.thread_time(),
                               time.clock_gettime(acker_clock))
    profiler = cProfile.Profile() if args.profile else None
    if profiler is not None:
        profiler.enable()
    run_all()
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.profile)
    split.executor_s = time.thread_time() - own
    while not acker.idle():
        time.sleep(0.0005)
    split.handle_s = time.process_time() - start
    split.acker_s = time.clock_gettime(acker_clock) - acker_start


def repetition(args: argparse.Namespace, rep: int, task: Any) -> Split:
    """Queue N messages, read them as a worker would, then (in turn) the loop and the
    handle run; fails unless every message was acked."""
    from django.db import connection

    from django_taskrunner.conf import get_settings
    from django_taskrunner.store import get_store
    from django_taskrunner.worker.acker import Acker
    from django_taskrunner.worker.executor import Executor
    from django_taskrunner.worker.fetcher import PREFETCH_MAX, Delivery
    from django_taskrunner.worker.outage import RedisStatus
    from django_taskrunner.worker.settings import worker_settings
    from django_taskrunner.worker.worker import Worker

    broker, consumer, split = get_store().streams, "bench-handle-1", Split()
    if args.job == "orm":
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE benchapp_benchrow RESTART IDENTITY")
    broker.client.flushall()
    queue = task.options.queue or get_settings().DEFAULT_QUEUE
    entries = queued_and_read(task, [{"i": i} for i in range(args.jobs)], queue, consumer)
    if args.worker_loop:  # the worker's own acker and executor, and its loop around them
        worker = Worker(broker, worker_settings([queue], concurrency=1, consumer=consumer))
        acker = worker.acker

        def run_all() -> None:
            for start in range(0, len(entries), PREFETCH_MAX):  # the largest read
                worker.accept(queue, entries[start:start + PREFETCH_MAX])  # handed over
                for item in worker.pool.drain_inbox():  # as a pool thread takes each
                    worker._run_item(item)
                worker.heartbeat.write_starts()  # its look: the ended starts dropped
    else:
        deliveries = [Delivery(queue, stream_id, body) for stream_id, body in entries]
        acker = Acker(broker, consumer, RedisStatus())
        executor = Executor(broker, consumer, acker.add, requeue=acker.requeue,
                            record=acker.record)

        def run_all() -> None:
            for delivery in deliveries:
                executor.handle(delivery)
    split.count_flushes(acker)
    acker.start()
    payloads = [{"i": args.jobs + i} for i in range(args.jobs)]
    for order in ((0, 1) if rep % 2 == 0 else (1, 0)):
        if order == 0:
            start = time.process_time()
            for payload in payloads:
                task.fn(payload)
            split.loop_s = time.process_time() - start
        else:
            handle_all(args, run_all, acker, split)
    acker.stop()
    left = broker.pending(queue)
    if left:
        raise SystemExit(f"{left} messages were not acked")
    return split


def per_task(args: argparse.Namespace, seconds: float) -> float:
    return seconds / args.jobs * 1e6


def measure(args: argparse.Namespace) -> int:
    import django

    django.setup()
    from django.core.management import call_command
    from djsite.benchapp import tasks

    call_command("migrate", "--run-syncdb", verbosity=0)
    task = tasks.orm if args.job == "orm" else tasks.noop
    splits = []
    for rep in range(args.reps):
        split = repetition(args, rep, task)
        splits.append(split)
        print(f"[{rep + 1}/{args.reps}] loop {per_task(args, split.loop_s):7.1f} µs/task  "
              f"handle {per_task(args, split.handle_s):7.1f} µs/task (executing thread "
              f"{per_task(args, split.executor_s):.1f}, acker thread "
              f"{per_task(args, split.acker_s):.1f})  {split.flushes} flushes of "
              f"{split.flushed / max(1, split.flushes):.1f} tasks, "
              f"{split.flush_s / max(1, split.flushes) * 1e6:.0f} µs CPU each",
              file=sys.stderr, flush=True)
    report(args, splits)
    return 0


def ran(args: argparse.Namespace) -> str:
    """What ran each message, for the summary line."""
    return "the worker's loop" if args.worker_loop else "Executor.handle"


def report(args: argparse.Namespace, splits: list[Split]) -> None:
    """The medians; for the ORM job also the median of each repetition's own cost (the
    handle run against the loop run of the same repetition)."""
    median = statistics.median
    loop = median([per_task(args, s.loop_s) for s in splits])
    handle = median([per_task(args, s.handle_s) for s in splits])
    acker = median([per_task(args, s.acker_s) for s in splits])
    flush = median([s.flush_s / max(1, s.flushes) * 1e6 for s in splits])
    size = median([s.flushed / max(1, s.flushes) for s in splits])
    threads = (f"; of it the acker's thread {acker:.1f} µs/task, its flushes of "
               f"{size:.1f} tasks {flush:.0f} µs CPU each")
    if args.job == "orm":
        own = median([per_task(args, s.handle_s - s.loop_s) for s in splits])
        print(f"job=orm jobs={args.jobs} reps={args.reps}: task function in a loop "
              f"{loop:.1f} µs/task, {ran(args)} + acker {handle:.1f} µs/task, the "
              f"runner's own {handle - loop:.1f} µs ({(handle - loop) / loop:+.1%} of the "
              f"task's; per repetition {own:.1f} µs){threads}")
    else:
        print(f"job={args.job} jobs={args.jobs} reps={args.reps}: {ran(args)} + acker "
              f"{handle:.1f} µs/task (the function itself {loop:.2f} µs){threads}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
