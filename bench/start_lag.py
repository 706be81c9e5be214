"""Start visibility: how soon `lookup(id)` of a started task says "running", and how soon
it shows what `ctx.set_progress()` set, on a loaded worker.

    taskset -c 0,1 python bench/start_lag.py           # 400 probes among 1,600 loads
    python bench/start_lag.py --probes 50 --reps 1     # a quick look

Each repetition queues `--probes` probe tasks, each after `--load` CPU-bound tasks
(`--burn-ms` of pure Python each, holding the GIL), and drains them all with an
in-process burst `Worker` of `--concurrency` threads (the real fetcher, pool, acker and
heartbeat; no scheduler). The worker runs on CPU 1, Redis on CPU 0, and so does an
observer process, which reads the records of the probes every millisecond (those
running, and the next 32 not started yet, in one pipeline).

A probe reads its own record on its first line (`lookup(ctx.id)`, counted when it says
"running"), then calls `ctx.set_progress({"at": <now, ms>})` and waits until its record
shows it. Printed: how many probes read "running" on their first line, and p50/p99/max,
in milliseconds, of
  start lag      when the observer first read "running", minus the attempt's start
                 (`started_at`, which the worker takes as it starts the attempt);
  progress lag   when the observer first read the progress, minus its `set_progress()`.
Both include up to a millisecond of the observer's polling. A probe whose "running"
the observer never read (it lasted less than one of its polls) counts with the lag of
the probe's own first read of "running" (5 ms polls), so that no late start is left out.
`BENCH_CHECKOUT=<another checkout>` measures that checkout's django_taskrunner instead
(before/after), with this script.
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
sys.path[:0] = [os.environ.get("BENCH_CHECKOUT") or str(BENCH.parent), str(BENCH)]

from benchlib import procs  # noqa: E402

# Longest a probe waits for its progress to show: past it, it ends (the observer counts
# it as never seen).
GIVE_UP_S = 5.0


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--probes", type=int, default=400)
    parser.add_argument("--load", type=int, default=4, help="CPU-bound tasks per probe")
    parser.add_argument("--burn-ms", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="CI: 30 probes, 1 rep")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.smoke:
        args.probes, args.reps = 30, 1
    with procs.private_redis("bench-start-lag-") as (workdir, url, _):
        if procs.can_pin():
            procs.pin_self(procs.WORKER_CPU)
        os.environ.update(BENCH_REDIS_URL=url, DJANGO_SETTINGS_MODULE="djsite.settings",
                          BENCH_DB=str(Path(workdir) / "bench.sqlite3"))
        return measure(args)


def burn(ms: float) -> None:
    """Pure Python for `ms` milliseconds of wall time: a thread holding the GIL."""
    end = time.perf_counter() + ms / 1000
    count = 0
    while time.perf_counter() < end:
        count += 1


def probe(ctx: Any, payload: Any) -> None:
    """Read its own record on its first line; set its progress and wait until it shows."""
    from django_taskrunner import lookup

    record = lookup(ctx.id)
    SEEN[ctx.id] = record is not None and record.status == "running"
    note_own_sight(ctx.id, record)
    value = {"at": time.time() * 1000}
    ctx.set_progress(value)
    give_up = time.monotonic() + GIVE_UP_S
    while time.monotonic() < give_up:
        now = lookup(ctx.id)
        note_own_sight(ctx.id, now)
        if now is not None and now.progress == value:
            return
        time.sleep(0.005)


def note_own_sight(task_id: str, record: Any) -> None:
    """The probe's own first read of "running" (its start lag as the probe saw it): used
    for a probe the observer missed, whose "running" lasted less than one of its polls
    (start write and progress landed in one beat, and the task ended right after)."""
    if (task_id not in OWN_LAG and record is not None and record.status == "running"
            and record.started_at is not None):
        OWN_LAG[task_id] = time.time() * 1000 - record.started_at.timestamp() * 1000


def observe(url: str, record_keys: list[str], results: Any, window: int = 32) -> None:
    """The observer process: poll the probes' records until each showed its progress (or
    ended); put {key: (start lag, progress lag)} on `results`."""
    import json

    import redis

    client = redis.Redis.from_url(url)
    started: dict[str, float] = {}
    progress: dict[str, float] = {}
    waiting = list(record_keys)  # in dispatch order: the worker starts them in that order
    deadline = time.monotonic() + 600
    while waiting and time.monotonic() < deadline:
        polled = [key for key in waiting if key in started] + [
            key for key in waiting if key not in started][:window]
        pipe = client.pipeline(transaction=False)
        for key in polled:
            pipe.hmget(key, "s", "st", "p")
        replies = pipe.execute()
        now = time.time() * 1000
        for key, (status, start, shown) in zip(polled, replies, strict=True):
            if status == b"running" and key not in started and start:
                started[key] = now - int(start)
            if shown and key not in progress:
                progress[key] = now - json.loads(shown)["at"]
            if key in progress or status in FINAL:
                waiting.remove(key)
        time.sleep(0.001)
    results.put({key: (started.get(key), progress.get(key)) for key in record_keys})


FINAL = {b"succeeded", b"failed", b"cancelled", b"expired"}
SEEN: dict[str, bool] = {}  # probe id -> it read "running" on its first line
OWN_LAG: dict[str, float] = {}  # probe id -> ms from its start to its own read of "running"


def register() -> tuple[Any, Any]:
    """The probe and the load as tasks of this process (its in-process worker runs them)."""
    from django_taskrunner import task

    probe_task = task(name="bench.start_probe", takes_context=True)(probe)
    load_task = task(name="bench.start_load")(lambda payload: burn(payload["ms"]))
    return probe_task, load_task


def drain(args: argparse.Namespace, probe_task: Any, load_task: Any
          ) -> tuple[int, list[float], list[float], int, int]:
    """One repetition: queue the probes among the load and run them all, observed. How
    many read "running" on their first line, the start lags, the progress lags, how
    many the observer never saw running or with their progress, and how many start lags
    are the probe's own read (the observer missed "running")."""
    import multiprocessing

    from django_taskrunner.runner import build_worker
    from django_taskrunner.store import get_store, keys
    from django_taskrunner.worker.settings import worker_settings

    broker = get_store().streams
    broker.client.flushall()
    SEEN.clear()
    OWN_LAG.clear()
    ids = []
    for n in range(args.probes):
        load_task.dispatch_many([{"ms": args.burn_ms}] * args.load)
        ids.append(probe_task.dispatch({"n": n}).id)
    record_keys = [keys.record_key(broker.prefix, task_id) for task_id in ids]
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    observer = context.Process(target=observe, args=(os.environ["BENCH_REDIS_URL"],
                                                      record_keys, results), daemon=True)
    observer.start()
    if procs.can_pin():
        os.sched_setaffinity(observer.pid, {procs.LOAD_CPU})
    worker = build_worker(broker, worker_settings(["default"], concurrency=args.concurrency,
                                            burst=True, scheduler=False))
    worker.run()
    lags = results.get(timeout=120)
    observer.join(10)
    if len(SEEN) != len(ids):
        raise SystemExit(f"{len(ids) - len(SEEN)} probes never ran")
    first = sum(1 for task_id in ids if SEEN[task_id])
    observed = [lags[key] for key in record_keys]
    own = [OWN_LAG[task_id] for task_id, (start, _p) in zip(ids, observed, strict=True)
           if start is None and task_id in OWN_LAG]
    starts = [start for start, _p in observed if start is not None] + own
    shown = [shown for _s, shown in observed if shown is not None]
    unseen = sum(1 for start, shown in observed if start is None or shown is None)
    return first, starts, shown, unseen, len(own)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def row(name: str, values: list[float]) -> str:
    if not values:
        return f"| {name} | 0 | - | - | - |"
    return (f"| {name} | {len(values)} | {statistics.median(values):.1f} | "
            f"{percentile(values, 0.99):.1f} | {max(values):.1f} |")


def measure(args: argparse.Namespace) -> int:
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", "--run-syncdb", verbosity=0)
    probe_task, load_task = register()
    first, starts, shown, unseen, own = 0, [], [], 0, 0
    for rep in range(args.reps):
        got = drain(args, probe_task, load_task)
        first, unseen, own = first + got[0], unseen + got[3], own + got[4]
        starts += got[1]
        shown += got[2]
        print(f"[{rep + 1}/{args.reps}] running at the first line: {got[0]}/{args.probes}; "
              f"start lag p50 {statistics.median(got[1] or [0]):.1f} ms", file=sys.stderr,
              flush=True)
    print(f"{args.probes} probes x {args.reps} reps, each after {args.load} CPU-bound tasks "
          f"of {args.burn_ms:g} ms, --concurrency {args.concurrency}, in-process burst worker")
    print(f"running at the task's first line: {first} of {args.probes * args.reps} probes")
    print(f"not seen running, or not seen with their progress: {unseen}")
    print(f"start lags read by the probe itself (the observer missed its running): {own}")
    print("| lag (ms) | probes | p50 | p99 | max |")
    print("|---|---:|---:|---:|---:|")
    print(row("start -> running readable", starts))
    print(row("set_progress -> readable", shown))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
