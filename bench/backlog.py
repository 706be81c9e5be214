"""A delayed backlog at 1x, 10x and 100x: what it costs Redis and the leader, and how
late other delayed tasks start while it waits and while a slice of it falls due.

    python bench/backlog.py [--sizes 10000,100000,1000000] [--slice 0.1] [--window 10]
    python bench/backlog.py --smoke                      # small sizes, short windows

For each size N, on a private redis-server (CPU 0, with this process) emptied between
sizes, and one `runtasks --queue bench` worker (CPU 1) that leads and runs the scheduler:

1. N * (1 - slice) delayed tasks due in a day go into the delayed set of queue `bulk`
   (known to the leader, consumed by nobody, so the figures are the scheduler's, not
   the pool's): the dispatch path's message and task record, a pipelined `add_delayed`
   script 5,000 a round trip. Redis `used_memory` before and after, over the count:
   bytes per delayed task (its set entry and its record).
2. Idle: the worker's CPU over --window s with nothing due; then probes: `probe` tasks
   on queue `bench`, each dispatched with `schedule_for` 100 ms before its due time,
   one every 50 ms for --window s. Lateness = the time the task started - its due time.
3. Moving: N * slice more delayed tasks, all due at one instant a little ahead; from
   that instant until the last of them is on the `bulk` stream, the worker's CPU and the
   probes' lateness again. Every probe must have run exactly once, and the stream must
   hold the slice exactly (none lost, none moved twice).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from benchlib import procs  # noqa: E402

from bench.delayed_timing import percentile  # noqa: E402
from bench.growth import Table, markdown  # noqa: E402

DAY_MS = 86_400_000
LOAD_BATCH = 5000
PROBE_LEAD_MS = 300  # a probe is dispatched this long before its due time
PROBE_EVERY_MS = 20  # the default of --probe-every
TARGET_P99_MS = 50.0
MIN_CPU_WINDOW_S = 0.2  # CPU times tick every 10 ms: a shorter move reads as 0 or 100 %


class Run:
    """One Redis, one Django set-up, a fresh worker per size."""

    def __init__(self, args: argparse.Namespace, url: str, workdir: str) -> None:
        import django

        django.setup()
        from django.core.management import call_command

        from django_taskrunner.store import get_store

        call_command("migrate", verbosity=0)
        self.args, self.url, self.workdir = args, url, workdir
        self.broker = get_store().streams
        self.client = self.broker.client

    def load(self, count: int, due_ms: int) -> float:
        """`count` delayed tasks on queue `bulk` due at `due_ms`; seconds it took."""
        from bench.timing_site.tasks import record_lateness
        from django_taskrunner.core.dispatch import new_message
        from django_taskrunner.core.records import dispatch_record
        from django_taskrunner.store import keys, scripts

        prefix, started = self.broker.prefix, time.monotonic()
        zset, wake = keys.delayed_key(prefix, "bulk"), keys.wake_channel(prefix, "bulk")

        def batch(pipe: object, first: int) -> None:
            for n in range(first, min(count, first + LOAD_BATCH)):
                message = new_message(record_lateness, {"run": "bulk", "due": due_ms, "n": n},
                                      queue="bulk", start_ms=due_ms)
                record = dispatch_record(message, record_lateness, "bulk", due_ms)
                if record is not None:
                    self.broker.records.queue_new(pipe, record)
                scripts.queue(pipe, "add_delayed", [zset], [str(due_ms), message.to_json(), wake])

        for first in range(0, count, LOAD_BATCH):  # a batch sent twice (NOSCRIPT) adds once
            scripts.execute_loading(self.client, lambda pipe, f=first: batch(pipe, f),
                                    ["add_delayed"])
        return time.monotonic() - started

    def used_memory(self) -> int:
        return int(self.client.info("memory")["used_memory"])

    def start_worker(self) -> object:
        from django_taskrunner.store.keys import leader_key

        env = procs.child_env(self.url)
        env.update(DJANGO_SETTINGS_MODULE="bench.timing_site.settings",
                   PYTHONPATH=os.pathsep.join([str(BENCH.parent), env["PYTHONPATH"]]))
        with open(f"{self.workdir}/worker.log", "ab") as log:
            worker = procs.spawn(procs.python("-m", "django", "runtasks", "--queue", "bench",
                                              "--concurrency", "8", "--log-level", "WARNING"),
                                 cpu=procs.WORKER_CPU, env=env, stdout=log.fileno())
        key = leader_key(self.broker.prefix, self.broker.group)
        wait_until(lambda: self.client.exists(key), 60, worker)
        time.sleep(self.args.settle)  # the scheduler's first resync, the fetchers' reads
        return worker

    def probes(self, run: str, until: threading.Event, start_ms: int) -> list[bool]:
        """Dispatch probes due every --probe-every ms from `start_ms` until `until` is set;
        for each, whether its dispatch returned before it was due (else it is left out:
        its lateness would be this process's, not the scheduler's)."""
        from bench.timing_site.tasks import probe
        from django_taskrunner import schedule_for
        from django_taskrunner.core import clock

        in_time: list[bool] = []
        while not until.is_set():
            sent = len(in_time)
            due = start_ms + sent * self.args.probe_every
            pause = (due - PROBE_LEAD_MS - clock.now_ms()) / 1000
            if pause > 0:
                time.sleep(pause)
            when = datetime.fromtimestamp(due / 1000, tz=UTC)
            schedule_for(probe, {"run": run, "due": math.floor(when.timestamp() * 1000),
                                 "n": sent}, when=when)
            in_time.append(clock.now_ms() < due)
        return in_time

    def lateness(self, run: str, in_time: list[bool], worker: object) -> dict[int, int]:
        """Probe number -> its lateness (ms), once all ran, of those dispatched in time;
        exits unless each ran exactly once."""
        from bench.timing_site.tasks import probe_keys

        late, runs = probe_keys(run)
        sent = len(in_time)
        wait_until(lambda: self.client.llen(late) >= sent, 60, worker)
        time.sleep(0.2)  # a second run of one would show now
        counts = {int(v) for v in self.client.hvals(runs)}
        if self.client.hlen(runs) != sent or counts != {1}:
            raise SystemExit(f"{run}: {sent} probes, runs per probe {sorted(counts)}")
        pairs = (v.split(b":") for v in self.client.lrange(late, 0, -1))
        if not all(in_time):
            print(f"{run}: {in_time.count(False)} of {sent} probes dispatched too late, "
                  "left out", file=sys.stderr)
        return {int(n): int(ms) for n, ms in pairs if in_time[int(n)]}


def wait_until(condition, timeout: float, worker=None) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if worker is not None and worker.poll() is not None:
            raise SystemExit(f"the worker exited with {worker.returncode}")
        if time.monotonic() > deadline:
            raise SystemExit("timed out waiting; see the worker's log")
        time.sleep(0.01)


def cpu_percent(pid: int, seconds: float) -> float:
    start = procs.cpu_seconds(pid)
    time.sleep(seconds)
    return (procs.cpu_seconds(pid) - start) / seconds * 100


class Probes:
    """Probes sent from a thread (`Run.probes`) until `stop()`, which returns what it did."""

    def __init__(self, run: Run, name: str, start_ms: int) -> None:
        self._stop, self._sent = threading.Event(), list[bool]()
        self._thread = threading.Thread(target=self._send, args=(run, name, start_ms))
        self._thread.start()

    def _send(self, run: Run, name: str, start_ms: int) -> None:
        self._sent = run.probes(name, self._stop, start_ms)

    def stop(self) -> list[bool]:
        self._stop.set()
        self._thread.join()
        return self._sent


def idle_phase(run: Run, worker: object) -> dict[str, object]:
    from django_taskrunner.core import clock

    figures: dict[str, object] = {"cpu_idle": cpu_percent(worker.pid, run.args.window)}
    probes = Probes(run, "idle", clock.now_ms() + 2 * PROBE_LEAD_MS)
    time.sleep(run.args.window)
    figures["idle"] = list(run.lateness("idle", probes.stop(), worker).values())
    return figures


def moving_phase(run: Run, worker: object, rest: int, count: int,
                 load_rate: float) -> dict[str, object]:
    """The slice of `count` falls due at one instant; figures until it is all moved."""
    from django_taskrunner.core import clock
    from django_taskrunner.store.keys import delayed_key, stream_key

    instant = clock.now_ms() + round((count / load_rate * 1.5 + 2) * 1000)
    run.load(count, instant)
    first_due = max(instant - 500, clock.now_ms() + PROBE_LEAD_MS)
    probes = Probes(run, "moving", first_due)
    zset = delayed_key(run.broker.prefix, "bulk")
    wait_until(lambda: clock.now_ms() >= instant, 600, worker)
    cpu, started = procs.cpu_seconds(worker.pid), time.monotonic()
    wait_until(lambda: run.client.zcard(zset) <= rest, 600, worker)
    cpu = (procs.cpu_seconds(worker.pid) - cpu) / max(time.monotonic() - started, 1e-3) * 100
    seconds = (clock.now_ms() - instant) / 1000  # from the due time (polled every 10 ms)
    time.sleep(0.5)  # probes due just after the move
    late = run.lateness("moving", probes.stop(), worker)
    # The probes due from the instant on: while it moves, and in the 0.5 s after.
    lateness = [ms for n, ms in late.items() if first_due + n * run.args.probe_every >= instant]
    on_stream = run.client.xlen(stream_key(run.broker.prefix, "bulk"))
    if on_stream != count or run.client.zcard(zset) != rest:
        raise SystemExit(f"moved {on_stream} of {count}; {run.client.zcard(zset)} left")
    return {"move_s": seconds, "cpu_moving": cpu, "moving": lateness,
            "cpu_ms_per_1k": cpu / 100 * seconds * 1000 / count * 1000}


def one_size(run: Run, size: int) -> list[str]:
    from django_taskrunner.core import clock
    from django_taskrunner.scheduling.scheduler import register_queues

    count = max(1, round(size * run.args.slice))
    rest = size - count
    run.client.flushall()
    register_queues(run.broker, ["bulk"])
    base = run.used_memory()
    load_s = run.load(rest, clock.now_ms() + DAY_MS)
    per_task = (run.used_memory() - base) / rest
    worker = run.start_worker()
    try:
        f = idle_phase(run, worker)
        f.update(moving_phase(run, worker, rest, count, rest / load_s))
    finally:
        procs.kill(worker)
    idle, moving = f["idle"], f["moving"]
    print(f"{size:,}: slowest probes idle {sorted(idle)[-3:]}, moving {sorted(moving)[-3:]} ms",
          file=sys.stderr)
    p99 = percentile(moving, 0.99)
    return [f"{size:,}", f"{rest / load_s:,.0f}/s", f"{per_task:,.0f}", f"{f['cpu_idle']:.2f}%",
            f"{percentile(idle, 0.5):.0f} / {percentile(idle, 0.99):.0f}",
            f"{count:,} in {f['move_s'] * 1000:,.0f} ms",
            f"{f['cpu_moving']:.0f}%" if f["move_s"] >= MIN_CPU_WINDOW_S else "(too short)",
            f"{f['cpu_ms_per_1k']:.0f}" if f["move_s"] >= MIN_CPU_WINDOW_S else "(too short)",
            f"{percentile(moving, 0.5):.0f} / {p99:.0f} ({len(moving)})",
            "met" if p99 <= TARGET_P99_MS else "**missed**"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--slice", type=float, default=0.1, help="part that falls due at once")
    parser.add_argument("--window", type=float, default=10.0, help="seconds per idle figure")
    parser.add_argument("--settle", type=float, default=3.0)
    parser.add_argument("--probe-every", type=int, default=PROBE_EVERY_MS,
                        help="ms between two probes' due times (each sent 100 ms ahead)")
    parser.add_argument("--smoke", action="store_true", help="sizes 1000,2000; short windows")
    args = parser.parse_args(argv)
    if args.smoke:
        args.sizes, args.window, args.settle = "1000,2000", 2.0, 1.0
    procs.pin_self(procs.LOAD_CPU)
    rows: Table = []
    with procs.private_redis("bench-backlog-") as (workdir, url, _):
        os.environ.update(BENCH_REDIS_URL=url, BENCH_DIR=workdir, BENCH_PREFIX="bench",
                          DJANGO_SETTINGS_MODULE="bench.timing_site.settings")
        run = Run(args, url, workdir)
        for size in (int(s) for s in args.sizes.split(",")):
            rows.append(one_size(run, size))
            print(" | ".join(rows[-1]), f"(load {os.getloadavg()[0]:.1f})", file=sys.stderr,
                  flush=True)
    print(markdown(["delayed tasks", "loaded at", "Redis bytes per delayed task",
                    "leader CPU idle", "lateness idle p50 / p99 ms", "slice due at once",
                    "leader CPU moving", "CPU ms per 1,000 moved",
                    "lateness moving p50 / p99 ms (probes)", "p99 <= 50 ms"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
