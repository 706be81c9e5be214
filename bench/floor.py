"""The floor under the worker's CPU per task: the bare loop doing the Redis work a
django-taskrunner worker must do per task, beside the bare loop and `runtasks`.

    taskset -c 0,1 python bench/floor.py                  # 20,000 no-op tasks, 3 reps
    python bench/floor.py --jobs 2000 --reps 1             # a quick look

The performance issue asks for a worker CPU per task at most 1.3 times the bare
XREADGROUP/XACK loop's (peers.py), with task records on, and at most 1.15 times the
floor with the runner's threads (`pool`, below). This script measures, in one
run, side by side, the same no-op tasks (the peers benchmark's job, an INCR) drained by:
- the bare loop of the peers benchmark (its own stream and body);
- `benchlib.floor_worker` at three levels, on messages `dispatch_many` queued (records
  on): `read` (the bare loop on the runner's messages), `delete` (also XDEL of what it
  acked, as the runner does) and `records` (also each task's final record, the acker's
  `record_write.lua` call with a success's fields, and its finished-index entry);
- `benchlib.floor_worker` at `pool`: `records` with the runner's threads (a reader, 8
  pool threads, an acker), none of its steps;
- `runtasks` with its defaults (8 threads) and with `--concurrency 1`, records on, and
  with records off (`RESULT_TTL = 0`), which the `delete` level matches;
- Huey (2 threads), the best peer of the peers benchmark, for the drain rates' scale.

Each repetition runs every system once, in an order rotated each time; the worker is
pinned to one CPU, Redis and the producer to the other, as in peers.py. It prints each
drain (tasks/s, worker and Redis CPU per task), then the medians, each CPU ÷ the bare
loop's, what is left of 1.3x the bare loop once the floor is paid, and `runtasks` ÷
the `pool` floor.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import measure, procs  # noqa: E402
from benchlib.systems import BY_KEY, TASKRUNNER_WORKER  # noqa: E402

TARGET = 1.3  # worker CPU per task ÷ the bare loop's, the goal
POOL_TARGET = 1.15  # runtasks' worker CPU per task ÷ the pool floor's, the same


@dataclass(frozen=True)
class Drain:
    """One way of draining the tasks: who produces them, who runs them, records or not."""

    key: str
    label: str
    producer: str
    worker: tuple[str, ...]
    records: bool = True  # dispatched with records on (RESULT_TTL 1 day)
    writes_records: bool = False  # its worker writes each task's final record
    dispatch: str = "many"  # the producer's mode: batches, or one call a task


DRAINS = [
    Drain("bare", "bare XREADGROUP/XACK loop (peers.py)", "bare", BY_KEY["bare"].worker),
    Drain("read", "floor: read, json.loads, job, XACK", "taskrunner",
          ("-m", "benchlib.floor_worker", "read")),
    Drain("delete", "floor: + XDEL", "taskrunner", ("-m", "benchlib.floor_worker", "delete")),
    Drain("records", "floor: + XDEL + record_write.lua", "taskrunner",
          ("-m", "benchlib.floor_worker", "records"), writes_records=True),
    Drain("pool", "floor: + 8 pool threads and an acker thread", "taskrunner",
          ("-m", "benchlib.floor_worker", "pool"), writes_records=True),
    Drain("runner8", "runtasks -c8, records on", "taskrunner",
          (*TASKRUNNER_WORKER, "--concurrency", "8"), writes_records=True),
    Drain("runner1", "runtasks -c1, records on", "taskrunner",
          (*TASKRUNNER_WORKER, "--concurrency", "1"), writes_records=True),
    Drain("runner8off", "runtasks -c8, records off", "taskrunner",
          (*TASKRUNNER_WORKER, "--concurrency", "8"), records=False),
    Drain("huey", "Huey, 2 threads (the best peer of peers.py)", "huey", BY_KEY["huey"].worker,
          records=False, dispatch="plain"),
]


def one_drain(ctx: measure.Context, drain: Drain) -> dict[str, float]:
    """Queue `ctx.jobs` no-op tasks and drain them with one pinned worker."""
    ctx.client.flushall()
    ttl = "86400" if drain.records else "0"
    os.environ["BENCH_RESULT_TTL"] = ttl  # the producer's dispatches, and the worker's
    measure.produce(ctx, drain.producer, drain.dispatch, ctx.jobs)
    worker = procs.spawn(procs.python(*drain.worker), cpu=procs.WORKER_CPU,
                         env=procs.child_env(ctx.url))
    try:
        figures, _cut = measure.drain(ctx, worker)
        if drain.writes_records:  # the floor's writes must be the runner's, each of them
            written = succeeded_records(ctx, deadline=time.monotonic() + 10)
            if written != ctx.jobs:
                raise measure.BenchError(f"{drain.label}: {written} of {ctx.jobs} records "
                                         "say succeeded")
        if worker.poll() is not None:
            raise measure.BenchError(f"{drain.label}: worker exited with {worker.returncode}")
    finally:
        procs.kill(worker)
    return figures


def succeeded_records(ctx: measure.Context, deadline: float) -> int:
    """How many records say "succeeded", once all do or at `deadline` (the last ack
    batch's records land up to `ACK_LINGER_S` after the last job ran)."""
    client = ctx.client
    while True:
        pipe = client.pipeline(transaction=False)
        for key in client.scan_iter("bench:record:*", count=1000):
            pipe.hget(key, "s")
        written = sum(1 for status in pipe.execute() if status == b"succeeded")
        if written == ctx.jobs or time.monotonic() > deadline:
            return written
        time.sleep(0.1)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    procs.pin_self(procs.LOAD_CPU)
    rows: dict[str, list[dict[str, float]]] = {drain.key: [] for drain in DRAINS}
    with procs.private_redis("bench-floor-") as (workdir, url, redis_proc):
        os.environ["BENCH_DB"] = str(Path(workdir) / "bench.sqlite3")
        ctx = measure.Context(url=url, redis_proc=redis_proc, jobs=args.jobs, latency_jobs=0,
                              idle_jobs=0, smoke=False, timeout=600, workdir=workdir)
        for rep in range(args.reps):
            shift = rep % len(DRAINS)
            for drain in DRAINS[shift:] + DRAINS[:shift]:  # each first in turn
                figures = one_drain(ctx, drain)
                rows[drain.key].append(figures)
                print(f"rep {rep + 1} {drain.key:>10}: {figures['drain']:8,.0f} tasks/s  "
                      f"worker {figures['worker_cpu']:5.0f} us/task  "
                      f"redis {figures['redis_cpu']:5.0f} us/task", flush=True)
                time.sleep(0.5)
    report(args, rows)
    return 0


def times(value: float, base: float) -> str:
    """`value` ÷ `base` as "1.23x"; "n/a" when `base` read as no CPU at all (a run too
    short for the clock ticks CPU is counted in)."""
    return f"{value / base:.2f}x" if base > 0 else "n/a"


def report(args: argparse.Namespace, rows: dict[str, list[dict[str, float]]]) -> None:
    """The medians, each CPU ÷ the bare loop's, what 1.3x leaves above the floor, and
    runtasks ÷ the pool floor."""
    medians = {key: {k: statistics.median(r[k] for r in runs)
                     for k in ("drain", "worker_cpu", "redis_cpu")}
               for key, runs in rows.items()}
    bare = medians["bare"]["worker_cpu"]
    print()
    print(f"{args.jobs:,} no-op tasks, median of {args.reps}")
    huey = medians["huey"]["drain"]
    print("| drained by | tasks/s | ÷ Huey | worker CPU (us/task) | ÷ bare loop | "
          "Redis CPU (us/task) |")
    print("|---|---:|---:|---:|---:|---:|")
    for drain in DRAINS:
        figures = medians[drain.key]
        print(f"| {drain.label} | {figures['drain']:,.0f} | {times(figures['drain'], huey)} | "
              f"{figures['worker_cpu']:.0f} | {times(figures['worker_cpu'], bare)} | "
              f"{figures['redis_cpu']:.0f} |")
    print()
    budget = TARGET * bare
    for floor, runner in (("records", "runner8"), ("pool", "runner8"),
                          ("delete", "runner8off")):
        paid = medians[floor]["worker_cpu"]
        own = medians[runner]["worker_cpu"] - paid
        print(f"{runner}: floor ({floor}) {paid:.0f} us/task = {times(paid, bare)} the bare "
              f"loop; {TARGET}x leaves {budget - paid:.0f} us/task for the rest of the "
              f"runner, which takes {own:.0f}")
    pool, runner8 = medians["pool"]["worker_cpu"], medians["runner8"]["worker_cpu"]
    verdict = "n/a" if pool <= 0 else "met" if runner8 / pool <= POOL_TARGET else "missed"
    print(f"runner8 ÷ the pool floor: {times(runner8, pool)} (goal ≤ {POOL_TARGET}x: "
          f"{verdict})")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
