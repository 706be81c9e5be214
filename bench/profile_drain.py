"""Profile one `runtasks` process draining N queued tasks, with py-spy.

    python bench/profile_drain.py --jobs 50000 --concurrency 1 [--top 30] [--out stacks.txt]

Queues N tasks with `dispatch_many`, runs the worker under `py-spy record` (pinned like
peers.py), stops it once the N-th task ran, and prints the functions with the most
samples: self (the function itself) and total (with what it calls), and the samples per
part of the worker (the job's own work, the runner's Python, redis-py, json, the rest;
with `--gil`, that is where the worker's CPU goes). With `--steady`,
py-spy attaches to the worker once a tenth of the tasks ran and leaves before the last
tenth, so start-up and the drain's tail are not in the samples.
"""

from __future__ import annotations

import argparse
import collections
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil  # noqa: E402
from benchlib import measure, procs  # noqa: E402
from benchlib.systems import TASKRUNNER_WORKER  # noqa: E402

# The benchmark's job function: samples under it are the task's own work, which the
# bare loop does too. py-spy names a frame "function (file:line)", the file relative or
# absolute.
JOB_FILE = "benchlib/job.py:"


def where(frames: list[str]) -> str:
    """The part of the worker a sample belongs to: the job, or the library of the
    function it was in (the runner, redis-py, json, the rest)."""
    if any(frame.startswith("job (") and JOB_FILE in frame for frame in frames):
        return "the job (task function)"
    path = frames[-1].rpartition(" (")[2]
    for prefix, part in (("django_taskrunner/", "the runner's own Python"),
                         ("redis/", "redis-py (and hiredis), for the runner's commands"),
                         ("json/", "json")):
        if path.startswith(prefix) or f"/{prefix}" in path:
            return part
    return "the rest (threading, ...)"


def summarize(path: Path, top: int) -> str:
    """Self and total samples per function from py-spy's raw (collapsed) output, and the
    samples per part of the worker (`where`)."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    parts: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        raw = [f for f in stack.split(";") if f]
        frames = [f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0].split("/")[-1] + ")"
                  for f in raw]
        if not frames:
            continue
        n = int(count)
        samples += n
        own[frames[-1]] += n
        parts[where(raw)] += n
        for frame in set(frames):
            total[frame] += n
    lines = [f"{samples} samples", "", "by part %"]
    lines += [f"{100 * n / samples:5.1f}  {name}" for name, n in parts.most_common()]
    lines += ["", "self %  function"]
    lines += [f"{100 * n / samples:5.1f}  {name}" for name, n in own.most_common(top)]
    lines += ["", "total %  function"]
    lines += [f"{100 * n / samples:5.1f}  {name}" for name, n in total.most_common(top)]
    return "\n".join(lines)


def _attach_when_steady(ctx: measure.Context, spy_args: list[str], worker_argv: list[str],
                        url: str) -> subprocess.Popen[bytes]:
    """Start the worker, attach py-spy once a tenth of the tasks ran, and detach it (stop
    sampling) before the last tenth; returns the worker (py-spy has written its file)."""
    worker = procs.spawn(worker_argv, cpu=procs.WORKER_CPU, env=procs.child_env(url))
    measure.wait_for_count(ctx.client, ctx.jobs // 10, time.monotonic() + 600, 0.005)
    spy = procs.spawn([*spy_args, "--pid", str(worker.pid)], cpu=procs.LOAD_CPU,
                      env=procs.child_env(url))
    measure.wait_for_count(ctx.client, ctx.jobs * 9 // 10, time.monotonic() + 600, 0.005)
    spy.send_signal(signal.SIGINT)
    spy.wait(60)
    return worker


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--concurrency", default="1")
    parser.add_argument("--rate", default="1000", help="py-spy samples per second")
    parser.add_argument("--gil", action="store_true", help="only samples holding the GIL")
    parser.add_argument("--steady", action="store_true",
                        help="sample only the steady drain (a tenth in to a tenth before the end)")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--out", help="keep py-spy's collapsed stacks in this file")
    args = parser.parse_args(argv)
    procs.pin_self(procs.LOAD_CPU)
    with measure.drain_site("bench-profile-", args.jobs) as ctx:
        url = ctx.url
        stacks = Path(args.out or Path(ctx.workdir) / "stacks.txt")
        measure.produce(ctx, "taskrunner", "many", args.jobs)
        spy_args = ["py-spy", "record", *(["--gil"] if args.gil else []), "-r", args.rate,
                    "-f", "raw", "-o", str(stacks)]
        worker_argv = procs.python(*TASKRUNNER_WORKER, "--concurrency", args.concurrency)
        started = time.monotonic()
        if args.steady:
            worker = _attach_when_steady(ctx, spy_args, worker_argv, url)
        else:
            spy = procs.spawn([*spy_args, "--", *worker_argv], cpu=procs.WORKER_CPU,
                              env=procs.child_env(url))
        measure.wait_for_count(ctx.client, args.jobs, time.monotonic() + 600, 0.01)
        print(f"drained {args.jobs} in {time.monotonic() - started:.1f}s (with start-up)")
        if args.steady:
            procs.kill(worker)
        else:
            for child in psutil.Process(spy.pid).children():
                child.send_signal(signal.SIGTERM)
            spy.wait(60)
        print(summarize(stacks, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
