"""Side-by-side benchmark: django-taskrunner against Celery, RQ, Dramatiq, Huey, Taskiq
and streaQ.

    python bench/peers.py --jobs 20000     # the full run (under 10 minutes), updates docs
    python bench/peers.py --smoke          # small N; checks every task ran exactly once

Starts a private redis-server, runs every system in turn (raw limits, bare loop, ours,
the peers) and repeats the round, so noise hits all of them alike; prints one table of
medians, min–max and ratios, and writes it to docs/benchmarks.md (section "Peers").
See bench/README.md for what each figure means.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import measure, procs, report  # noqa: E402
from benchlib.systems import BY_KEY, SYSTEMS, System, missing_packages, version  # noqa: E402

DOCS = procs.ROOT / "docs" / "benchmarks.md"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20000, help="tasks per drain (default 20000)")
    parser.add_argument("--reps", type=int, default=3, help="interleaved repetitions (default 3)")
    parser.add_argument("--latency-jobs", type=int, default=1000,
                        help="tasks offered at 500/s for the latency figures (default 1000)")
    parser.add_argument("--idle-jobs", type=int, default=200,
                        help="tasks, one every 50 ms, for the idle latency (default 200: "
                             "with fewer, the p99 is the slowest one or two)")
    parser.add_argument("--drain-budget", type=float, default=12.0,
                        help="seconds of steady drain measured at most; a slower system is "
                             "measured on the tasks it ran by then (default 12)")
    parser.add_argument("--systems", default=",".join(BY_KEY),
                        help=f"comma-separated subset of {','.join(BY_KEY)}")
    parser.add_argument("--smoke", action="store_true",
                        help="small N, one repetition, assert every task ran exactly once")
    parser.add_argument("--drain-only", action="store_true",
                        help="skip the latency phases (a quicker look while profiling)")
    parser.add_argument("--against", metavar="CHECKOUT",
                        help="also run the chosen django-taskrunner systems from CHECKOUT "
                             "(its package and its bench/), in the same rounds, beside the "
                             "same bare-loop repetitions: a before/after comparison")
    parser.add_argument("--no-write", action="store_true", help="do not update the docs")
    parser.add_argument("--save", metavar="FILE", help="also save the raw figures as JSON")
    parser.add_argument("--load", metavar="FILE",
                        help="do not measure: print (and write) the table of a saved run")
    args = parser.parse_args(argv)
    if args.smoke:
        args.jobs, args.reps, args.latency_jobs, args.idle_jobs = 300, 1, 50, 5
        args.no_write, args.drain_budget = True, None
    if args.against:
        if not (Path(args.against) / "bench" / "benchlib").is_dir():
            parser.error(f"--against {args.against}: not a checkout with a bench/benchlib")
        args.against = str(Path(args.against).resolve())
        args.no_write = True  # a comparison, not the table of record
    return args


def run(args: argparse.Namespace) -> report.Results:
    with procs.private_redis("bench-peers-") as (workdir, url, redis_proc):
        os.environ["BENCH_DB"] = str(Path(workdir) / "bench.sqlite3")
        # Smoke mode fails within 40 s per wait, with the worker's output, rather than hang.
        timeout = 40.0 if args.smoke else max(120.0, args.jobs / 100)
        ctx = measure.Context(url=url, redis_proc=redis_proc, jobs=args.jobs,
                              latency_jobs=args.latency_jobs, idle_jobs=args.idle_jobs,
                              smoke=args.smoke, timeout=timeout, workdir=workdir,
                              drain_budget=args.drain_budget, drain_only=args.drain_only)
        chosen = chosen_systems(args)
        results: report.Results = {}
        for rep in range(1, args.reps + 1):
            blocks = [("raw", lambda: measure.raw_block(ctx))]
            for system in chosen:
                blocks.append((system.key, lambda s=system: measure.worker_block(ctx, s)))
                if args.against and system.producer == "taskrunner":
                    blocks.append((report.against_key(system.key),
                                   lambda s=system: against_block(ctx, s, args.against)))
            for key, block in blocks:
                started = time.monotonic()
                figures = block()
                for metric, value in figures.items():
                    results.setdefault(key, {}).setdefault(metric, []).append(value)
                print(f"[{rep}/{args.reps}] {key:12s} {time.monotonic() - started:5.1f}s  "
                      + "  ".join(f"{k}={v:,.1f}" for k, v in figures.items()),
                      file=sys.stderr, flush=True)
    return results


def chosen_systems(args: argparse.Namespace) -> list[System]:
    return [s for s in SYSTEMS if s.key in args.systems.split(",")]


def against_block(ctx: measure.Context, system: System, checkout: str) -> dict[str, float]:
    """`system`'s block with `checkout`'s package and bench/ in its children."""
    os.environ["BENCH_AGAINST"] = checkout
    try:
        return measure.worker_block(ctx, system)
    finally:
        del os.environ["BENCH_AGAINST"]


def versions() -> str:
    redis_version = subprocess.run([procs.redis_binary(), "--version"], capture_output=True,
                                   text=True).stdout.split()
    server = next((w.split("=")[1] for w in redis_version if w.startswith("v=")), "?")
    commit = commit_of(os.environ.get("BENCH_CHECKOUT") or str(procs.ROOT))
    names = ["django-taskrunner", "Django", "redis", "hiredis", "celery", "kombu", "rq",
             "dramatiq", "huey", "taskiq", "taskiq-redis", "streaq", "coredis"]
    parts = [f"Python {platform.python_version()}", f"redis-server {server}"]
    parts += [f"{name} {version(name)}" + (f" ({commit})" if name == "django-taskrunner" else "")
              for name in names]
    return ", ".join(parts)


def commit_of(checkout: str) -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout,
                          capture_output=True, text=True).stdout.strip() or "?"


def shown_args(argv: list[str]) -> list[str]:
    """The arguments that shape the measurement (not where figures were saved or loaded)."""
    shown, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--save", "--load"):
            skip = True
        elif not arg.startswith(("--save=", "--load=")) and arg != "--no-write":
            shown.append(arg)
    return shown


def section(args: argparse.Namespace, results: report.Results, argv: list[str]) -> str:
    pinned = "Redis and producers on CPU 0, the worker on CPU 1" if procs.can_pin() else \
        "not pinned (fewer than 2 CPUs)"
    command = " ".join(["python bench/peers.py", *shown_args(argv)])
    return "\n".join([
        f"Run of {datetime.date.today().isoformat()}: `{command}` — {args.jobs} tasks per "
        f"drain, {args.reps} interleaved repetitions, {os.cpu_count()} CPUs ({pinned}).",
        "", f"Versions: {versions()}.", "",
        "Medians of the repetitions; `÷ limit` divides by the raw redis-py figure (dispatch, "
        "drain) or by the bare loop (CPU, latency); a dispatch ratio is the producer's own: "
        "it alternates chunks of 1,000 tasks with as many raw XADDs (pipelined by 100 for "
        "batches) and divides the two times, so a load swing hits both. `÷ best peer` "
        "divides by the best of the peers (Celery, RQ, Dramatiq, Huey, Taskiq, streaQ) "
        "in the table. Rates: higher is better; CPU "
        "and latency: lower is better.", "",
        report.table(results), "",
        "Targets of the performance issue (its third round), from the same run:", "",
        report.targets(results), "",
        *([f"Against `{args.against}` ({commit_of(args.against)}): this checkout's figure "
           "÷ that one's, repetition by repetition (both ran in the same rounds), and each "
           "÷ the same round's bare loop (medians):",
           "", report.against(results), ""] if args.against else []),
    ])


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    missing = missing_packages(chosen_systems(args))
    if missing:
        print(f"missing packages: {', '.join(missing)}; install them with "
              "`pip install -e . --group bench` (pip 25.1+)", file=sys.stderr)
        return 2
    # SIGTERM unwinds like Ctrl+C, so every worker and the Redis server are killed.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    procs.pin_self(procs.LOAD_CPU)
    started = time.monotonic()
    try:
        results = json.loads(Path(args.load).read_text()) if args.load else run(args)
    except measure.BenchError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    if args.save:
        Path(args.save).write_text(json.dumps(results, indent=1))
    text = section(args, results, argv)
    print(text)
    print(f"total time: {time.monotonic() - started:.0f}s", file=sys.stderr)
    if args.smoke:
        print("smoke: every system ran every task exactly once")
    if not args.no_write:
        report.write_section(DOCS, text)
        print(f"written to {DOCS.relative_to(procs.ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
