"""Where a draining worker's CPU goes, thread by thread: each thread's CPU per task.

    taskset -c 0,1 python bench/thread_cpu.py                  # --jobs 40000 -c 8
    python bench/thread_cpu.py --concurrency 1
    python bench/thread_cpu.py --floor     # the pool floor of floor.py instead of runtasks
    python bench/thread_cpu.py --floor pool-decode   # that floor with the runner's decoder
    BENCH_CHECKOUT=<other checkout> python bench/thread_cpu.py   # that checkout's worker

Queues N tasks of the peers' job (one INCR) with `dispatch_many`, starts `runtasks`
pinned like `peers.py`, and reads every thread's user and system CPU from
/proc/<pid>/task once a tenth of the tasks ran and again at nine tenths: the steady
drain, without start-up and tail. Threads are named from `py-spy dump` (the names the
worker gives them: taskrunner-1..8 the pool, -acker, -fetch-<queue>, -heartbeat, ...).
It also counts the process's context switches per task, voluntary (a thread waited: a
read, a lock, an empty inbox) and involuntary (preempted). `--floor` measures the
`pool` level of `bench/floor.py` (a reader, 8 pool threads and an acker doing the same
Redis work with none of the runner's steps; its threads have no names): the same
hand-offs, so what differs is the Python each task runs. Linux only.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import job, measure, procs  # noqa: E402
from benchlib.systems import TASKRUNNER_WORKER  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def thread_cpu(pid: int) -> dict[int, tuple[float, float]]:
    """(user, system) CPU seconds of each thread of `pid`, by thread id."""
    times = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue  # the thread ended meanwhile
        fields = stat.rsplit(")", 1)[1].split()
        times[int(tid)] = (int(fields[11]) / TICK, int(fields[12]) / TICK)
    return times


def context_switches(pid: int) -> tuple[int, int]:
    """(voluntary, involuntary) context switches of every thread of `pid` so far."""
    voluntary = involuntary = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except OSError:
            continue  # the thread ended meanwhile
        for line in status.splitlines():
            name, _colon, value = line.partition(":")
            if name == "voluntary_ctxt_switches":
                voluntary += int(value)
            elif name == "nonvoluntary_ctxt_switches":
                involuntary += int(value)
    return voluntary, involuntary


def thread_names(pid: int, tries: int = 5) -> dict[int, str]:
    """Thread id -> the Python thread's name, from `py-spy dump` ({} without py-spy). A
    dump taken while the process is between two states can come back empty: tried again."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    for _ in range(tries):
        try:
            dump = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True,
                                  text=True, timeout=60).stdout
        except (OSError, subprocess.TimeoutExpired):
            return {}
        names = {int(tid): name
                 for tid, name in re.findall(r'^Thread (\d+) \([^)]*\): "([^"]+)"', dump, re.M)}
        if names:
            return names
    return {}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=40_000)
    parser.add_argument("--concurrency", default="8")
    parser.add_argument("--floor", nargs="?", const="pool", choices=["pool", "pool-decode"],
                        help="a pool level of floor.py's floor worker (8 threads; pool by "
                             "default) instead of runtasks")
    args = parser.parse_args(argv)
    procs.pin_self(procs.LOAD_CPU)
    with measure.drain_site("bench-threads-", args.jobs) as ctx:
        measure.produce(ctx, "taskrunner", "many", args.jobs)
        command = (("-m", "benchlib.floor_worker", args.floor) if args.floor
                   else (*TASKRUNNER_WORKER, "--concurrency", args.concurrency))
        worker = procs.spawn(procs.python(*command), cpu=procs.WORKER_CPU,
                             env=procs.child_env(ctx.url))
        try:
            measure.wait_for_count(ctx.client, args.jobs // 10, time.monotonic() + 600, 0.005)
            before, done_before = thread_cpu(worker.pid), int(ctx.client.get(job.DONE))
            switched_before = context_switches(worker.pid)
            started = time.perf_counter()
            names = thread_names(worker.pid)
            measure.wait_for_count(ctx.client, args.jobs * 9 // 10, time.monotonic() + 600,
                                   0.005)
            after, done_after = thread_cpu(worker.pid), int(ctx.client.get(job.DONE))
            switched_after = context_switches(worker.pid)
            seconds = time.perf_counter() - started
        finally:
            procs.kill(worker)
    tasks = done_after - done_before
    rows = []
    for tid, (user, system) in after.items():
        user0, system0 = before.get(tid, (0.0, 0.0))
        rows.append(((user - user0) / tasks * 1e6, (system - system0) / tasks * 1e6,
                     names.get(tid, "(not named: a thread of the interpreter or a library)")))
    rows.sort(key=lambda row: row[0] + row[1], reverse=True)
    drained = (f"floor.py's {args.floor} floor" if args.floor
               else f"runtasks --concurrency {args.concurrency}")
    print(f"{drained}: {tasks} tasks in {seconds:.2f} s "
          f"({tasks / seconds:,.0f} tasks/s), CPU µs per task by thread:")
    for user, system, name in rows:  # in clock ticks (10 ms): a quiet thread may read 0
        print(f"  {user + system:7.1f}  (user {user:6.1f}, system {system:5.1f})  {name}")
    print(f"  {sum(u + s for u, s, _ in rows):7.1f}  in all")
    voluntary, involuntary = (after_n - before_n for after_n, before_n
                              in zip(switched_after, switched_before, strict=True))
    print(f"context switches per task: {voluntary / tasks:.2f} voluntary, "
          f"{involuntary / tasks:.2f} involuntary")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
