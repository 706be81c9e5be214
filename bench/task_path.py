"""The path of one plain task through the package, traced: from `dispatch()` to its XACK.

    python bench/task_path.py [--calls]

Starts a private Redis and a worker in this process (one pool thread, no scheduler, the
figures written once a minute), waits until it is idle, then dispatches one no-op task and
records every call of a function of the package, in every thread, until the task's entry
is acked (read with a plain client, outside the package). Prints how many calls that
took, how many distinct functions and modules they were in, and how many times the trip
changed module (each thread's calls in order, summed over the threads); with `--calls`,
each thread's calls too. Run it on two checkouts to compare their layouts: the figure
that matters is the modules a reader must open to follow one task.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import procs  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", action="store_true", help="print each thread's calls")
    args = parser.parse_args()
    with procs.private_redis("task-path-") as server:
        os.environ["BENCH_REDIS_URL"] = server.url
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djsite.settings")
        print(report(trace_one_task(server.url), args.calls))


def trace_one_task(url: str) -> dict[str, list[tuple[str, str]]]:
    """Thread name -> the package's (module, function) calls, in order, of one task's trip."""
    import django

    django.setup()
    import redis

    import django_taskrunner
    from django_taskrunner import dispatch
    from django_taskrunner.runner import build_worker
    from django_taskrunner.store import get_store
    from django_taskrunner.worker.settings import worker_settings

    package = str(Path(django_taskrunner.__file__).parent) + os.sep
    calls: dict[str, list[tuple[str, str]]] = collections.defaultdict(list)
    tracing = threading.Event()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and tracing.is_set() and frame.f_code.co_filename.startswith(package):
            module = frame.f_code.co_filename[len(package):]
            calls[threading.current_thread().name].append((module, frame.f_code.co_qualname))

    broker = get_store().streams
    worker = build_worker(broker, worker_settings(
        ["default"], concurrency=1, scheduler=False, consumer="task-path"))
    threading.setprofile(profile)
    runner = threading.Thread(target=worker.run, name="worker", daemon=True)
    runner.start()
    plain = redis.Redis.from_url(url)
    time.sleep(2)  # the worker's threads started and its fetcher waits in its read
    sys.setprofile(profile)
    tracing.set()
    started = time.perf_counter()
    dispatch("bench.noop", {})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        sys.setprofile(None)  # the polling below is not the trip
        pending = plain.xpending(broker.stream("default"), broker.group)["pending"]
        acked = pending == 0 and _delivered(plain, broker.stream("default"))
        sys.setprofile(profile)
        if acked:
            break
        time.sleep(0.0005)
    tracing.clear()
    sys.setprofile(None)
    print(f"dispatch to ack: {1000 * (time.perf_counter() - started):.1f} ms")
    threading.setprofile(None)  # type: ignore[arg-type]
    worker.request_stop()
    runner.join(10)
    return dict(calls)


def _delivered(client: Any, stream: str) -> bool:
    """The group delivered an entry (so pending 0 means it was acked, not never read)."""
    groups = client.xinfo_groups(stream) if client.exists(stream) else []
    return any(group.get("last-delivered-id", b"0-0") not in (b"0-0", "0-0")
               for group in groups)


# The threads a task passes through: the dispatching one, its queue's fetcher, a pool
# thread, the heartbeat (its "running" write) and the acker. The others (monitor, pause
# watch, cancels listener, time limits, the event loop) only happen to run meanwhile.
PATH_THREADS = ("MainThread", "taskrunner-fetch-", "taskrunner-1", "taskrunner-heartbeat",
                "taskrunner-acker")


def figures(calls: dict[str, list[tuple[str, str]]]) -> str:
    every = [call for thread in calls.values() for call in thread]
    changes = sum(sum(1 for a, b in zip(thread, thread[1:], strict=False) if a[0] != b[0])
                  for thread in calls.values())
    return (f"{len(every)} calls, {len(set(every))} distinct functions, "
            f"{len({module for module, _ in every})} modules, {changes} module changes")


def report(calls: dict[str, list[tuple[str, str]]], show_calls: bool) -> str:
    path = {name: thread for name, thread in calls.items()
            if name == "MainThread" or name.startswith(PATH_THREADS[1:])}
    modules = sorted({module for thread in path.values() for module, _ in thread})
    lines = [f"the task's path ({', '.join(path)}): {figures(path)}",
             f"every thread of the worker meanwhile: {figures(calls)}",
             "modules on the path: " + ", ".join(modules)]
    if show_calls:
        for name, thread in calls.items():
            lines += ["", f"--- {name}"] + [f"{module}  {function}" for module, function in thread]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
