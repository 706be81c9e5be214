"""What the same Python costs right after its thread wakes, against back to back.

    taskset -c 0,1 python bench/wake_cost.py             # 300 samples of each
    python bench/wake_cost.py --samples 20                 # the smoke run

A worker's code between two tasks runs right after a wake-up: a blocking read that
returned, a thread woken by another, a timer that fired. On a virtual machine whose CPU
idles meanwhile, that code can run several times slower than the same code in a loop
(cold caches, a virtual CPU the host has to schedule again): a cost that no profile of
a flood of no-op tasks shows, and that grows the runner's share of a task that waits
on a database (docs/benchmarks.md, "A real Django task").

One process pinned to one CPU times one fixed piece of Python (a small task message
encoded and decoded, a dict filled), CPU time of its own thread (`time.thread_time()`),
median of N samples: back to back; right after `time.sleep()` of 0.1, 1 and 10 ms; and
in a thread woken by another through a `threading.Condition` after 10 ms (the acker's
pattern: woken, it sends what finished meanwhile).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time

BODY = json.dumps({"id": "0" * 32, "task": "app.tasks.send_mail", "q": "default",
                   "payload": {"to": "someone@example.com", "n": 1}, "at": 1764000000000})


def work() -> None:
    """The fixed piece of Python: about what a task's own bookkeeping does."""
    fields = {}
    for i in range(40):
        fields[f"k{i}"] = str(i)
    json.dumps(json.loads(BODY))


def timed() -> float:
    start = time.thread_time()
    work()
    return time.thread_time() - start


def after_sleep(gap_s: float, samples: int) -> list[float]:
    found = []
    for _ in range(samples):
        time.sleep(gap_s)
        found.append(timed())
    return found


def woken_thread(gap_s: float, samples: int) -> list[float]:
    """A thread waits on a condition; this one notifies it every `gap_s`."""
    cond = threading.Condition()
    pending = [0]
    found: list[float] = []

    def waiter() -> None:
        for _ in range(samples):
            with cond:
                while not pending[0]:
                    cond.wait()
                pending[0] -= 1
            found.append(timed())

    thread = threading.Thread(target=waiter)
    thread.start()
    for _ in range(samples):
        time.sleep(gap_s)
        with cond:
            pending[0] += 1
            cond.notify()
    thread.join()
    return found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--cpu", type=int, default=1, help="the CPU to pin to (default 1)")
    args = parser.parse_args(argv)
    if hasattr(os, "sched_setaffinity") and args.cpu in os.sched_getaffinity(0):
        os.sched_setaffinity(0, {args.cpu})
    for _ in range(200):  # warm up
        work()
    rows = [("back to back", [timed() for _ in range(args.samples)])]
    for gap_ms in (0.1, 1.0, 10.0):
        rows.append((f"after sleep({gap_ms:g} ms)", after_sleep(gap_ms / 1000, args.samples)))
    rows.append(("thread woken by another, every 10 ms", woken_thread(0.010, args.samples)))
    hot = statistics.median(rows[0][1])
    print(f"{'case':40s} {'median µs':>10s} {'p90 µs':>8s} {'÷ back to back':>15s}")
    for label, found in rows:
        median = statistics.median(found)
        p90 = sorted(found)[int(len(found) * 0.9)]
        print(f"{label:40s} {median * 1e6:10.1f} {p90 * 1e6:8.1f} {median / hot:14.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
