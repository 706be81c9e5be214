"""Delayed-task timing: how late delayed tasks start on an idle worker, and how long
100,000 tasks falling due at one instant take to move onto their stream.

    python bench/delayed_timing.py [--tasks 1000] [--spread 10] [--bulk 100000]

It starts its own redis-server and one `manage.py runtasks` worker (which becomes the
leader and runs the scheduler). With two or more CPUs, Redis and this process (the
load) are pinned to CPU 0 and the worker to CPU 1 with `taskset`.

Lateness is (time the task function started) - (its due time), both read from the
same host clock. Three runs:
  upfront  every task added before the first is due, due times random over --spread s;
  live     each task added 100 ms before it is due (the scheduler is woken by the
           dispatch's PUBLISH each time);
  bulk     --bulk tasks due at the same instant, on a queue the worker does not
           consume: the time until the last is on the stream, the longest Redis PING
           seen meanwhile, and how long plain tasks dispatched meanwhile waited for the
           worker (its fetchers and pool go on while its scheduler moves the batch).
"""

from __future__ import annotations

import argparse
import os
import random  # noqa: S311 - due times for a benchmark, not secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIVE_LEAD_MS = 100


def pinned(cpu: int, command: list[str]) -> list[str]:
    """`command` run under `taskset -c cpu` when there is a second CPU to pin to."""
    if shutil.which("taskset") and (os.cpu_count() or 1) >= 2:
        return ["taskset", "-c", str(cpu), *command]
    return command


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_redis(workdir: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    binary = shutil.which("redis-server") or "redis-server"
    proc = subprocess.Popen(
        pinned(0, [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "no", "--dir", workdir]),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, f"redis://127.0.0.1:{port}/0"


def wait_until(condition, timeout: float, interval: float = 0.01) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit("benchmark: timed out waiting; is the worker running?")
        time.sleep(interval)


def percentile(values: list[int], fraction: float) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))])


def summary(name: str, values: list[int]) -> str:
    return (f"| {name} | {len(values)} | {statistics.median(values):.0f} | "
            f"{percentile(values, 0.99):.0f} | {max(values)} | {min(values)} |")


class Bench:
    def __init__(self, args: argparse.Namespace, redis_url: str) -> None:
        import django

        django.setup()
        from django_taskrunner.store import get_store

        self.args = args
        self.broker = get_store().streams
        self.client = self.broker.client
        self.redis_url = redis_url

    def add(self, run: str, due_ms: int, pipe=None) -> None:  # type: ignore[no-untyped-def]
        """One delayed task through the dispatch path, due exactly at `due_ms`."""
        from bench.timing_site.tasks import record_lateness
        from django_taskrunner.core.dispatch import new_message
        from django_taskrunner.core.sending import add_delayed
        from django_taskrunner.store import scripts
        from django_taskrunner.store.keys import delayed_key, wake_channel

        message = new_message(record_lateness, {"run": run, "due": due_ms}, start_ms=due_ms)
        if pipe is None:
            add_delayed(message, due_ms)
        else:  # the same script, pipelined (bulk set-up only)
            scripts.run(pipe, "add_delayed", [delayed_key(self.broker.prefix, message.queue)],
                        [str(due_ms), message.to_json(),
                         wake_channel(self.broker.prefix, message.queue)])

    def lateness(self, run: str, expected: int, timeout: float) -> list[int]:
        from bench.timing_site.tasks import lateness_key

        key = lateness_key(run)
        wait_until(lambda: self.client.llen(key) >= expected, timeout, 0.05)
        return [int(v) for v in self.client.lrange(key, 0, -1)]

    def upfront(self) -> list[int]:
        from django_taskrunner.core import clock

        start = clock.now_ms() + 1500
        for _ in range(self.args.tasks):
            self.add("upfront", start + random.randrange(self.args.spread * 1000))
        return self.lateness("upfront", self.args.tasks, self.args.spread + 30)

    def live(self) -> list[int]:
        from django_taskrunner.core import clock

        start = clock.now_ms() + 500
        dues = sorted(start + random.randrange(self.args.spread * 1000)
                      for _ in range(self.args.tasks))
        for due in dues:
            pause = (due - LIVE_LEAD_MS - clock.now_ms()) / 1000
            if pause > 0:
                time.sleep(pause)
            self.add("live", due)
        return self.lateness("live", self.args.tasks, 30)

    def bulk(self) -> tuple[float, float, list[int]]:
        from bench.timing_site.tasks import record_lateness
        from django_taskrunner.core import clock
        from django_taskrunner.store.keys import delayed_key, stream_key

        count, prefix = self.args.bulk, self.broker.prefix
        due = clock.now_ms() + 60_000
        for first in range(0, count, 5000):
            pipe = self.client.pipeline(transaction=False)
            for n in range(first, min(count, first + 5000)):
                self.add_bulk(pipe, n, due)
            pipe.execute()
        # Then give them all one due time, shortly ahead, in one script, and announce it.
        zset = delayed_key(prefix, "bulk")
        instant = clock.now_ms() + 1500
        self._rescore(zset, instant)
        pings: list[float] = []
        stop = threading.Event()
        probe = threading.Thread(target=self._ping_probe, args=(pings, stop, instant))
        probe.start()
        wait_until(lambda: clock.now_ms() >= instant, 5, 0.001)
        during = 0
        while self.client.zcard(zset):  # meanwhile, plain tasks for the worker to pick up
            record_lateness.dispatch({"run": "during", "due": clock.now_ms()})
            during += 1
            time.sleep(0.005)
        moved_after = (clock.now_ms() - instant) / 1000
        stop.set()
        probe.join()
        assert self.client.xlen(stream_key(prefix, "bulk")) == count, "bulk move lost tasks"
        lateness = self.lateness("during", during, 30)
        return moved_after, max(pings, default=0.0), lateness

    def add_bulk(self, pipe, n: int, due: int) -> None:  # type: ignore[no-untyped-def]
        from bench.timing_site.tasks import record_lateness
        from django_taskrunner.core.dispatch import new_message
        from django_taskrunner.store.keys import delayed_key

        message = new_message(record_lateness, {"run": "bulk", "due": due, "n": n},
                              queue="bulk", start_ms=due)
        pipe.zadd(delayed_key(self.broker.prefix, "bulk"), {message.to_json(): due})

    def _rescore(self, zset: str, instant: int) -> None:
        """Give every member the score `instant` and wake the scheduler for it."""
        from django_taskrunner.store.keys import wake_channel

        self.client.eval("local m = redis.call('ZRANGE', KEYS[1], 0, -1) "
                         "for i = 1, #m, 2000 do "
                         "  local args = {} "
                         "  for j = i, math.min(i + 1999, #m) do "
                         "    args[#args + 1] = ARGV[1]; args[#args + 1] = m[j] end "
                         "  redis.call('ZADD', KEYS[1], unpack(args)) end", 1, zset, instant)
        self.client.publish(wake_channel(self.broker.prefix, "bulk"), instant)

    def _ping_probe(self, pings: list[float], stop: threading.Event, instant: int) -> None:
        import redis

        from django_taskrunner.core import clock

        client = redis.Redis.from_url(self.redis_url)
        while not stop.is_set():
            sent = time.perf_counter()
            client.ping()
            if clock.now_ms() >= instant:
                pings.append((time.perf_counter() - sent) * 1000)
            time.sleep(0.001)
        client.close()


def start_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        pinned(1, [sys.executable, "-m", "django", "runtasks", "--queue", "bench",
                   "--concurrency", "8"]),
        cwd=ROOT, env=env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--spread", type=int, default=10, help="seconds")
    parser.add_argument("--bulk", type=int, default=100_000)
    args = parser.parse_args()

    if (os.cpu_count() or 1) >= 2:
        os.sched_setaffinity(0, {0})
    workdir = tempfile.mkdtemp(prefix="bench-delayed-")
    redis_proc, url = start_redis(workdir)
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.timing_site.settings",
           "BENCH_REDIS_URL": url, "BENCH_PREFIX": f"bench{os.getpid()}", "BENCH_DIR": workdir,
           "PYTHONPATH": str(ROOT)}
    os.environ.update(env)
    sys.path.insert(0, str(ROOT))
    worker = None
    try:
        time.sleep(0.3)
        bench = Bench(args, url)
        from django.core.management import call_command

        from django_taskrunner.scheduling.scheduler import register_queues
        from django_taskrunner.store.keys import leader_key

        call_command("migrate", verbosity=0)
        register_queues(bench.broker, ["bulk"])  # known to the leader, consumed by nobody
        worker = start_worker(env)
        wait_until(lambda: bench.client.exists(leader_key(bench.broker.prefix,
                                                          bench.broker.group)), 30)
        time.sleep(0.5)
        print(f"cpus={os.cpu_count()} pinned={'yes' if (os.cpu_count() or 1) >= 2 else 'no'} "
              f"tasks={args.tasks} spread={args.spread}s bulk={args.bulk}")
        print("| run | tasks | p50 ms | p99 ms | max ms | min ms |")
        print("|---|---|---|---|---|---|")
        print(summary("upfront", bench.upfront()), flush=True)
        print(summary("live", bench.live()), flush=True)
        moved_after, worst_ping, during = bench.bulk()
        print(summary("during bulk move", during))
        print(f"\nbulk: {args.bulk} tasks due at one instant all on the stream after "
              f"{moved_after:.2f} s ({args.bulk / moved_after:,.0f}/s); longest PING meanwhile "
              f"{worst_ping:.1f} ms")
    finally:
        if worker is not None:
            worker.send_signal(signal.SIGTERM)
            worker.wait(30)
        redis_proc.terminate()
        redis_proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
