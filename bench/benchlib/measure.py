"""One measurement block per system: dispatch N, drain them, then latency, then kill.

Every figure comes from this machine in this run; a block returns a dict of metric ->
value (rates in tasks/s, CPU in microseconds per task, latency in milliseconds).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis
from benchlib import job, procs
from benchlib.systems import System, worker_argv

LATENCY_RATE, IDLE_RATE = 500.0, 20.0


class BenchError(RuntimeError):
    """A system did not finish its tasks, or ran one twice."""


@dataclass
class Context:
    """What every block needs: Redis, its process, sizes and the mode."""

    url: str
    redis_proc: subprocess.Popen[bytes]
    jobs: int
    latency_jobs: int
    idle_jobs: int
    smoke: bool
    timeout: float
    workdir: str
    drain_budget: float | None = None  # seconds of steady drain measured at most
    drain_only: bool = False  # skip the latency phases


    @property
    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)


@contextlib.contextmanager
def drain_site(prefix: str, jobs: int) -> Iterator[Context]:
    """A private redis-server and the bench site's database beside it, and the Context of
    one drain of `jobs` tasks (no latency phases): what a one-worker script needs."""
    with procs.private_redis(prefix) as (workdir, url, redis_proc):
        os.environ["BENCH_DB"] = str(Path(workdir) / "bench.sqlite3")
        yield Context(url=url, redis_proc=redis_proc, jobs=jobs, latency_jobs=0, idle_jobs=0,
                      smoke=False, timeout=600, workdir=workdir)


def produce(ctx: Context, producer: str, mode: str, n: int, *, cpu: int = procs.LOAD_CPU,
            rate: float | None = None) -> float:
    """Run the producer process; returns the seconds it timed."""
    return float(produce_timed(ctx, producer, mode, n, cpu=cpu, rate=rate)["seconds"])


def produce_timed(ctx: Context, producer: str, mode: str, n: int, *, cpu: int = procs.LOAD_CPU,
                  rate: float | None = None, paired: bool = False) -> dict[str, float | None]:
    """Run the producer process; returns what it timed (`seconds`, `raw_seconds`)."""
    argv = procs.python("-m", "benchlib.producer", producer, mode, str(n))
    if paired:
        argv.append("--paired")
    if rate is not None:
        argv += ["--rate", str(rate)]
    if ctx.smoke:
        argv.append("--smoke")
    proc = procs.spawn(argv, cpu=cpu, env=procs.child_env(ctx.url), stdout=subprocess.PIPE)
    try:
        out, _ = proc.communicate(timeout=ctx.timeout)
    finally:
        procs.kill(proc)
    if proc.returncode != 0:
        raise BenchError(f"producer {producer} {mode} failed:\n{out.decode(errors='replace')}")
    timed: dict[str, float | None] = json.loads(out.decode().strip().splitlines()[-1])
    return timed


def raw_block(ctx: Context) -> dict[str, float]:
    """The physical limits: raw XADD (one by one, pipelined) and raw read + ack."""
    figures = {}
    for mode, cpu, metric in (("xadd", procs.LOAD_CPU, "dispatch"),
                              ("xadd-pipe", procs.LOAD_CPU, "dispatch_many"),
                              ("read", procs.WORKER_CPU, "drain")):
        ctx.client.flushall()
        figures[metric] = ctx.jobs / produce(ctx, "raw", mode, ctx.jobs, cpu=cpu)
    return figures


def wait_for_count(client: redis.Redis, target: int, deadline: float, poll: float) -> int:
    while True:
        done = int(client.get(job.DONE) or 0)
        if done >= target:
            return done
        if time.monotonic() > deadline:
            raise BenchError(f"only {done} of {target} tasks finished in time")
        time.sleep(poll)


def drain(ctx: Context, worker: subprocess.Popen[bytes]) -> tuple[dict[str, float], bool]:
    """Steady drain rate and CPU per task, from the first finished task to the last.

    A slow system is measured for `drain_budget` seconds only; the second value says
    whether it was cut short (tasks are then left in the queue).
    """
    client, n = ctx.client, ctx.jobs
    deadline = time.monotonic() + ctx.timeout
    first = wait_for_count(client, 1, deadline, 0.0005)
    t1, w1, r1 = time.perf_counter(), procs.cpu_seconds(worker.pid), procs.cpu_seconds(
        ctx.redis_proc.pid)
    s1 = procs.context_switches(worker.pid)
    if ctx.drain_budget is not None:
        deadline = min(deadline, time.monotonic() + ctx.drain_budget)
    try:
        last = wait_for_count(client, n, deadline, 0.002)
        cut = False
    except BenchError:
        if ctx.drain_budget is None:
            raise
        last, cut = int(client.get(job.DONE) or 0), True
    t2, w2, r2 = time.perf_counter(), procs.cpu_seconds(worker.pid), procs.cpu_seconds(
        ctx.redis_proc.pid)
    s2 = procs.context_switches(worker.pid)
    tasks = max(1, last - first)
    return {"drain": tasks / (t2 - t1), "worker_cpu": (w2 - w1) / tasks * 1e6,
            "redis_cpu": (r2 - r1) / tasks * 1e6, "switches": (s2 - s1) / tasks}, cut


def latency(ctx: Context, system: System, n: int, rate: float) -> tuple[float, float]:
    """p50 and p99 end-to-end latency (ms) of `n` tasks offered at `rate` per second."""
    client = ctx.client
    client.set(job.DONE, 0)
    client.delete(job.LATENCIES)
    produce(ctx, system.producer, "latency", n, rate=rate)
    wait_for_count(client, n, time.monotonic() + ctx.timeout, 0.005)
    samples = sorted(float(x) * 1000 for x in client.lrange(job.LATENCIES, 0, -1))
    if len(samples) != n:
        raise BenchError(f"{system.label}: {len(samples)} latencies for {n} tasks")
    return statistics.median(samples), samples[min(n - 1, int(n * 0.99))]


def check_exactly_once(ctx: Context, system: System) -> None:
    """Smoke mode: every task numbered 0..N-1 ran once, and nothing ran twice."""
    time.sleep(0.3)  # a duplicate delivery would show up meanwhile
    client = ctx.client
    seen = {int(k): int(v) for k, v in client.hgetall(job.SEEN).items()}
    done = int(client.get(job.DONE) or 0)
    twice = sorted(k for k, v in seen.items() if v != 1)
    missing = sorted(set(range(ctx.jobs)) - set(seen))
    if done != ctx.jobs or twice or missing:
        raise BenchError(f"{system.label}: done={done} of {ctx.jobs}, ran twice: {twice[:10]}, "
                         f"missing: {missing[:10]}")


def start_worker(ctx: Context, system: System) -> subprocess.Popen[bytes]:
    with open(f"{ctx.workdir}/{system.key}.log", "ab") as log:
        return procs.spawn(worker_argv(system), cpu=procs.WORKER_CPU,
                           env=procs.child_env(ctx.url), stdout=log.fileno())


def fresh_worker(ctx: Context, system: System, old: subprocess.Popen[bytes]
                 ) -> subprocess.Popen[bytes]:
    """After a drain cut short: kill the worker, empty Redis, start a new one and warm it."""
    procs.kill(old)
    ctx.client.flushall()
    worker = start_worker(ctx, system)
    try:
        produce(ctx, system.producer, "plain", 20)
        wait_for_count(ctx.client, 20, time.monotonic() + ctx.timeout, 0.01)
    except BaseException:
        procs.kill(worker)
        raise
    return worker


def worker_block(ctx: Context, system: System) -> dict[str, float]:
    """Dispatch N, start the worker, drain, measure latency; the worker is killed after."""
    ctx.client.flushall()
    timed = produce_timed(ctx, system.producer, system.dispatch_mode, ctx.jobs, paired=True)
    metric = "dispatch" if system.dispatch_mode == "plain" else "dispatch_many"
    seconds, raw_seconds = float(timed["seconds"] or 0), float(timed["raw_seconds"] or 0)
    # The rate, and its ratio to raw XADD timed in alternating chunks by the same process.
    figures = {metric: ctx.jobs / seconds, f"{metric}_vs_raw": raw_seconds / seconds}
    log_path = f"{ctx.workdir}/{system.key}.log"
    worker = start_worker(ctx, system)
    try:
        drained, cut = drain(ctx, worker)
        figures.update(drained)
        if ctx.smoke:
            check_exactly_once(ctx, system)
        if cut:
            worker = fresh_worker(ctx, system, worker)
        if ctx.drain_only:
            return figures
        time.sleep(0.2)
        figures["p50"], figures["p99"] = latency(ctx, system, ctx.latency_jobs, LATENCY_RATE)
        figures["idle_p50"], figures["idle_p99"] = latency(ctx, system, ctx.idle_jobs, IDLE_RATE)
        if worker.poll() is not None:
            raise BenchError(f"{system.label}: worker exited with {worker.returncode}")
    except BenchError as exc:
        with open(log_path, "rb") as log:
            tail = log.read()[-3000:].decode(errors="replace")
        raise BenchError(f"{exc}\n--- {system.label} worker output ---\n{tail}") from None
    finally:
        procs.kill(worker)
    return figures
