"""Where an idle worker's latency goes: one `runtasks` in this process, a task every
50 ms, and a time stamp at each stage of the way from the dispatch to the task's start.

    taskset -c 0,1 python bench/pickup_trace.py            # --tasks 120 --concurrency 1

Starts a private redis-server, runs `runtasks` in this process with its Fetcher, Worker
and Executor wrapped to note the time a read returned entries, the hand-off to the pool
(`Worker.accept`) and the start of `Executor.handle`; the task notes its own start. The
dispatching thread is in the same process, so its dispatch competes with the worker for
the GIL: compare the stages with each other and across commits, not with peers.py's
end-to-end figures. Prints the median of each stage over the last 100 tasks.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from benchlib import procs  # noqa: E402

marks: dict[str, list[float]] = {}


def noted(label: str, call: Callable[..., Any], *, when: Callable[[Any], bool] | None = None
          ) -> Callable[..., Any]:
    """`call`, noting the time it returned under `label` (when `when(result)` holds)."""
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if when is None:
            marks.setdefault(label, []).append(time.time())
        result = call(*args, **kwargs)
        if when is not None and when(result):
            marks.setdefault(label, []).append(time.time())
        return result
    return wrapper


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=120)
    parser.add_argument("--concurrency", default="1")
    args = parser.parse_args(argv)
    with procs.private_redis("bench-pickup-") as (workdir, url, _):
        os.environ.update(procs.child_env(url), BENCH_DB=str(Path(workdir) / "bench.sqlite3"))
        return trace(args)


def trace(args: argparse.Namespace) -> int:
    import django

    django.setup()
    from django.core.management import call_command
    from djsite.benchapp import tasks

    from django_taskrunner.store.streams import Broker
    from django_taskrunner.worker.executor import Executor
    from django_taskrunner.worker.worker import Worker

    call_command("migrate", "--run-syncdb", verbosity=0)
    Broker.read_checked = noted("read", Broker.read_checked, when=lambda read: bool(read[0]))
    Worker.accept = noted("accept", Worker.accept)
    Executor.handle = noted("handle", Executor.handle)
    tasks.run_job = noted("job", tasks.run_job)
    sent: list[float] = []

    def produce() -> None:
        time.sleep(3)  # the worker up and idle
        for _ in range(args.tasks):
            sent.append(time.time())
            tasks.job.dispatch({"t": sent[-1]})
            time.sleep(0.05)
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=produce, daemon=True).start()
    call_command("runtasks", "--concurrency", args.concurrency, "--log-level", "WARNING")
    last = min(100, len(sent))
    stages = [("dispatch -> read returned", sent, marks["read"]),
              ("read -> hand-off", marks["read"], marks["accept"]),
              ("hand-off -> handle starts", marks["accept"], marks["handle"]),
              ("handle -> task starts", marks["handle"], marks["job"]),
              ("dispatch -> task starts", sent, marks["job"])]
    for name, start, end in stages:
        ms = statistics.median(b - a for a, b in zip(start[-last:], end[-last:], strict=True))
        print(f"{name:28s} {ms * 1000:6.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
