"""What one function for a plain task could save at most: `Executor.handle()` against a
stripped run of the same task that skips every policy, in one process.

    taskset -c 0,1 python bench/plain_bound.py              # --jobs 5000 --reps 4
    PYTHONPATH=<other checkout> python bench/plain_bound.py  # that checkout's package

The stripped run (`stripped_run()` below) keeps only what any runner with task records
must do for a plain task that succeeds: decode and check the message, find its task,
register the attempt (the heartbeat and the watchdog read it), call the function, write
the final record and ack through the worker's own acker, count the success. It leaves out
the cancel, expiry, reclaim and limit checks, the lock release, the pick-up and run-time
figures, the signals and tracing hooks and the step loop. It is not a correct runner:
it is the upper bound of what fusing the steps into one function for plain tasks (the
design the last performance note proposed) could save.

Two tasks, each with both ways, alternating, N messages each: `bench.noop` (does
nothing) and `bench.job` (one INCR with redis-py, the job of `peers.py`). CPU is
`time.thread_time()` of the executing thread: what the pool thread pays per task; the
acker's thread is the same for both.
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

WAYS = ("handle", "stripped")


def stripped_run() -> Any:
    """The least a plain task's run does (see the module docstring): no policy step. Made
    once Django is set up, so that its imports are not part of each call."""
    from django_taskrunner.core.message import TaskMessage
    from django_taskrunner.core.registry import registry
    from django_taskrunner.worker.steps import Run, record_ttl, write_outcome

    def stripped(executor: Any, delivery: Any) -> None:
        run = Run(delivery)
        message = run.message = TaskMessage.from_json(delivery.body,
                                                      stream_id=delivery.stream_id)
        message.queue = delivery.queue
        task = run.task = registry.find(message.task_name)
        attempt = run.attempt = executor.running.start(task, message, 300.0, run.shard,
                                                       record_ttl=record_ttl(executor, run))
        executor.call(attempt)
        executor.running.settle(attempt)
        write_outcome(executor, run, "succeeded")
        executor.ack(run.shard, run.stream_id)
        executor.stats.succeeded(message.queue, run.shown_name)

    return stripped


def one_pass(task: Any, way: str, jobs: int, stripped: Any) -> float:
    """Queue `jobs` messages of `task`, read them, run them `way`; CPU µs per task of the
    executing thread."""
    from django_taskrunner.store import get_store
    from django_taskrunner.worker.acker import Acker
    from django_taskrunner.worker.executor import Executor
    from django_taskrunner.worker.fetcher import Delivery
    from django_taskrunner.worker.outage import RedisStatus

    broker, consumer, queue = get_store().streams, "bench-bound-1", "default"
    entries = queued_and_read(task, [None] * jobs, queue, consumer)
    deliveries = [Delivery(queue, stream_id, body) for stream_id, body in entries]
    acker = Acker(broker, consumer, RedisStatus())
    acker.start()
    executor = Executor(broker, consumer, acker.add, requeue=acker.requeue,
                        record=acker.record)
    start = time.thread_time()
    if way == "handle":
        for delivery in deliveries:
            executor.handle(delivery)
    else:
        for delivery in deliveries:
            stripped(executor, delivery)
    spent = time.thread_time() - start
    acker.stop()
    left = broker.pending(queue)
    if left:
        raise SystemExit(f"{left} messages were not acked")
    return spent / jobs * 1e6


def measure(args: argparse.Namespace) -> int:
    import django

    django.setup()
    from django.core.management import call_command
    from djsite.benchapp import tasks

    call_command("migrate", "--run-syncdb", verbosity=0)
    stripped = stripped_run()
    figures: dict[tuple[str, str], list[float]] = {}
    for rep in range(args.reps):
        for task in (tasks.noop, tasks.job):
            ways = WAYS if rep % 2 == 0 else WAYS[::-1]
            for way in ways:
                figures.setdefault((task.name, way), []).append(
                    one_pass(task, way, args.jobs, stripped))
        print(f"[{rep + 1}/{args.reps}] " + "  ".join(
            f"{name} {way} {values[-1]:.1f}" for (name, way), values in figures.items()),
            file=sys.stderr, flush=True)
    print(f"jobs={args.jobs} reps={args.reps}, CPU µs per task of the executing thread "
          f"(median, min-max):")
    for name in (tasks.noop.name, tasks.job.name):
        handle, bare = figures[(name, "handle")], figures[(name, "stripped")]
        saved = [1 - s / h for h, s in zip(handle, bare, strict=True)]
        print(f"  {name:10} handle {statistics.median(handle):6.1f} ({min(handle):.1f}-"
              f"{max(handle):.1f})  stripped {statistics.median(bare):6.1f} ({min(bare):.1f}-"
              f"{max(bare):.1f})  saved at most {statistics.median(saved):.0%} "
              f"({min(saved):.0%}-{max(saved):.0%}, per repetition)")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=4)
    args = parser.parse_args(argv)
    with procs.private_redis("bench-bound-") as (workdir, url, _):
        procs.pin_self(procs.WORKER_CPU)
        os.environ.update(DJANGO_SETTINGS_MODULE="djsite.settings", BENCH_REDIS_URL=url,
                          BENCH_DB=str(Path(workdir) / "bench.sqlite3"))
        return measure(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
