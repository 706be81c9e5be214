"""Queues per worker: one `runtasks` (default options) on 1, 10 and 100 queues, idle and
draining (bench/NOTES.md, "How cost grows", "Queues per worker").

    python bench/queues_growth.py                    # 1, 10, 100 queues; 3 reps; medians
    python bench/queues_growth.py --sizes 1,10 --reps 5 --jobs 20000
    python bench/queues_growth.py --smoke            # 1 and 3 queues, 600 numbered tasks
    python bench/queues_growth.py --sizes 100 --max-connections 0   # redis-py's default pool

The configurations of a size: no `-Q` (the worker consumes the queues dispatches used,
side by side), the queues named in a `-Q` list (read in that order, strictly) and in a
`-Q name:1` list (a weighted round robin); at the largest size also no `-Q` with what a
user sets to lower the idle cost (`BLOCK_MS` 5000, `STATS_INTERVAL` 5) and the strict
order with `BLOCK_MS` 100 (a read of an emptied queue returns sooner). Each
repetition runs every configuration once, in an order rotated from one repetition to
the next, on one private redis-server (CPU 0, with this script), the worker on CPU 1:

- idle: one task dispatched to each queue (so every queue is in use), the worker
  started, and once it has run them all and `--settle` s more, over `--window` s:
  Redis commands/s (INFO commandstats, this script's INFO calls left out), Redis CPU
  (used_cpu_sys + used_cpu_user) and the worker's CPU (psutil), as % of one core;
- drain: N tasks (the no-op job of bench/peers.py) queued round robin
  over the queues with `dispatch_many`, a fresh worker, its rate from the first
  finished task to the N-th, and worker and Redis CPU per task. With --smoke every task
  is numbered and must have run exactly once.

The worker's REDIS_URL carries `?max_connections=500` (`--max-connections`): with
redis-py 8's default pool of 100 connections a worker of about 90 queues or more fails
(`MaxConnectionsError`; docs/worker.md says why).

Prints the medians as one Markdown table, then the idle commands/s by command.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

import psutil  # noqa: E402
import redis  # noqa: E402
from benchlib import job, measure, procs  # noqa: E402
from benchlib.systems import TASKRUNNER_WORKER, version  # noqa: E402

from bench.growth import markdown  # noqa: E402

# What a user sets to lower the idle cost; and a strict order's short reads.
TUNED = (("BENCH_BLOCK_MS", "5000"), ("BENCH_STATS_INTERVAL", "5"))
SHORT_BLOCK = (("BENCH_BLOCK_MS", "100"),)
MODES = {"known": "no -Q (side by side)", "strict": "-Q list (strict order)",
         "weighted": "-Q name:1 list (weighted)"}
# A worker holds a connection per queue while its fetcher blocks, plus its pool threads'
# and its monitor's: redis-py 8's default pool (100) runs out near 90 queues.
MAX_CONNECTIONS = 500
BATCH = 500  # tasks per dispatch_many round trip
Figures = dict[str, float]


@dataclass(frozen=True)
class Config:
    """One worker set-up: how many queues, how they are named to it, its settings."""

    queues: int
    mode: str  # a key of MODES
    env: tuple[tuple[str, str], ...] = ()  # bench/djsite settings from the environment

    @property
    def label(self) -> str:
        tuned = "".join(f", {name.removeprefix('BENCH_')} {value}" for name, value in self.env)
        return f"{self.queues}, {MODES[self.mode]}{tuned}"

    def names(self, run: int) -> list[str]:
        """The queue names of run number `run`: DEFAULT_QUEUE first, so `known` consumes
        exactly these. New names each run: a process announces a queue as used once a
        while (`core/sending.py`), so after FLUSHALL this one would not announce it again."""
        return ["default", *(f"r{run}-q{n}" for n in range(1, self.queues))]

    def argv(self, names: list[str]) -> list[str]:
        weight = ":1" if self.mode == "weighted" else ""
        listed = [arg for name in names for arg in ("--queue", name + weight)]
        return procs.python(*TASKRUNNER_WORKER, *(listed if self.mode != "known" else ()))


def configs(sizes: list[int]) -> list[Config]:
    """`known` at every size, the `-Q` lists where there is more than one queue (for one
    queue all are the same worker); at the largest size the tuned worker, and the strict
    order with a short BLOCK_MS (its reads of an emptied queue return sooner)."""
    found = []
    for size in sizes:
        found.append(Config(size, "known"))
        if size > 1:
            found += [Config(size, "strict"), Config(size, "weighted")]
    found.append(Config(max(sizes), "known", TUNED))
    if max(sizes) > 1:
        found.append(Config(max(sizes), "strict", SHORT_BLOCK))
    return found


def dispatch_spread(names: list[str], n: int, numbered: bool) -> None:
    """`n` tasks round robin over `names` (task i to queue i mod len), BATCH a round trip."""
    from djsite.benchapp import tasks

    per_queue: dict[str, list[dict[str, int]]] = defaultdict(list)
    for i in range(n):
        per_queue[names[i % len(names)]].append({"i": i} if numbered else {})
    for name, payloads in per_queue.items():
        for start in range(0, len(payloads), BATCH):
            tasks.job.dispatch_many(payloads[start:start + BATCH], queue=name)


def start_worker(ctx: measure.Context, config: Config, names: list[str]
                 ) -> subprocess.Popen[bytes]:
    with open(f"{ctx.workdir}/worker.log", "ab") as log:
        return procs.spawn(config.argv(names), cpu=procs.WORKER_CPU,
                           env=procs.child_env(ctx.url, **dict(config.env)), stdout=log.fileno())


def stop_worker(worker: subprocess.Popen[bytes]) -> None:
    """SIGTERM first, so the worker leaves as it does in production (its leader lease
    and heartbeat given up); then the group is killed."""
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            pass
    procs.kill(worker)


def redis_snapshot(client: redis.Redis) -> tuple[float, dict[str, int], float]:
    """(monotonic time, calls per command, Redis CPU seconds)."""
    stats = client.info("commandstats")
    cpu = client.info("cpu")
    # A subcommand is "script|load": a space, so that it does not split a table cell.
    calls = {name.removeprefix("cmdstat_").replace("|", " "): int(value["calls"])
             for name, value in stats.items()}
    return time.monotonic(), calls, float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])


def idle_phase(ctx: measure.Context, config: Config, names: list[str],
               args: argparse.Namespace) -> Figures:
    """The idle figures of a worker that has run one task of each of its queues."""
    dispatch_spread(names, len(names), numbered=False)
    worker = start_worker(ctx, config, names)
    try:
        measure.wait_for_count(ctx.client, len(names), time.monotonic() + ctx.timeout, 0.05)
        time.sleep(args.settle)
        client = ctx.client  # one connection, opened before the window
        t1, calls1, cpu1 = redis_snapshot(client)
        w1 = procs.cpu_seconds(worker.pid)
        time.sleep(args.window)
        t2, calls2, cpu2 = redis_snapshot(client)
        w2 = procs.cpu_seconds(worker.pid)
        if worker.poll() is not None:
            raise measure.BenchError(f"{config.label}: the worker exited ({worker.returncode})")
        threads = psutil.Process(worker.pid).num_threads()
        clients = int(client.info("clients")["connected_clients"]) - 1  # less this one
    finally:
        stop_worker(worker)
    seconds = t2 - t1
    figures = {f"cmd:{name}": (calls - calls1.get(name, 0)) / seconds
               for name, calls in calls2.items() if name != "info"}
    figures = {name: rate for name, rate in figures.items() if rate > 0}
    figures.update(commands=sum(figures.values()), redis_cpu=(cpu2 - cpu1) / seconds * 100,
                   worker_cpu=(w2 - w1) / seconds * 100, threads=threads, clients=clients)
    return figures


def drain_phase(ctx: measure.Context, config: Config, names: list[str]) -> Figures:
    """The drain of `ctx.jobs` tasks spread over the queues by a fresh worker."""
    ctx.client.delete(job.DONE, job.SEEN)
    dispatch_spread(names, ctx.jobs, numbered=ctx.smoke)
    worker = start_worker(ctx, config, names)
    try:
        drained, _cut = measure.drain(ctx, worker)
        if ctx.smoke:
            measure.check_exactly_once(ctx, config)  # type: ignore[arg-type]  # its label
    finally:
        stop_worker(worker)
    return drained


def one_run(ctx: measure.Context, config: Config, run: int,
            args: argparse.Namespace) -> Figures:
    """Idle, then drain, on a Redis emptied first."""
    ctx.client.flushall()
    names = config.names(run)
    figures = idle_phase(ctx, config, names, args)
    drained = drain_phase(ctx, config, names)
    figures.update(drain=drained["drain"], worker_cpu_task=drained["worker_cpu"],
                   redis_cpu_task=drained["redis_cpu"])
    print(f"{config.label}: idle {figures['commands']:,.1f} commands/s, Redis "
          f"{figures['redis_cpu']:.2f}%, worker {figures['worker_cpu']:.2f}%, "
          f"{figures['threads']:.0f} threads, {figures['clients']:.0f} connections; drain "
          f"{figures['drain']:,.0f}/s, {figures['worker_cpu_task']:,.0f} µs worker "
          f"{figures['redis_cpu_task']:,.0f} µs Redis a task (load {os.getloadavg()[0]:.1f})",
          file=sys.stderr, flush=True)
    return figures


def run_all(ctx: measure.Context, args: argparse.Namespace) -> dict[Config, list[Figures]]:
    """Every configuration once a repetition, the order rotated by one each time."""
    order = configs(args.sizes)
    results: dict[Config, list[Figures]] = {config: [] for config in order}
    for rep in range(args.reps):
        shift = rep % len(order)
        for config in order[shift:] + order[:shift]:
            results[config].append(one_run(ctx, config, len(results[config]) * 100
                                           + order.index(config), args))
    return results


def med(runs: list[Figures], key: str) -> float:
    return statistics.median(run.get(key, 0.0) for run in runs)


def spread(runs: list[Figures], key: str) -> str:
    values = [run[key] for run in runs]
    text = f"{statistics.median(values):,.0f}"
    return text if len(values) < 2 else f"{text} ({min(values):,.0f}-{max(values):,.0f})"


def main_table(results: dict[Config, list[Figures]]) -> str:
    rows = []
    for config, runs in results.items():
        commands = med(runs, "commands")
        rows.append([config.label, f"{commands:,.1f}", f"{commands / config.queues:,.1f}",
                     f"{med(runs, 'redis_cpu'):.2f}%", f"{med(runs, 'worker_cpu'):.2f}%",
                     f"{med(runs, 'threads'):.0f}", f"{med(runs, 'clients'):.0f}",
                     spread(runs, "drain"), f"{med(runs, 'worker_cpu_task'):,.0f}",
                     f"{med(runs, 'redis_cpu_task'):,.0f}"])
    return markdown(["queues of one worker", "idle Redis commands/s", "per queue",
                     "idle Redis CPU", "idle worker CPU", "worker threads",
                     "Redis connections", "drain tasks/s (min-max)", "worker µs/task",
                     "Redis µs/task"], rows)


def command_table(results: dict[Config, list[Figures]]) -> str:
    """Idle commands/s by command (medians), the commands of every configuration."""
    names = sorted({key for runs in results.values() for run in runs for key in run
                    if key.startswith("cmd:")},
                   key=lambda key: -max(med(runs, key) for runs in results.values()))
    rows = [[name.removeprefix("cmd:"), *(f"{med(runs, name):,.1f}" for runs in
                                           results.values())] for name in names]
    return markdown(["idle commands/s by command", *(c.label for c in results)], rows)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,10,100", help="queues of the worker, comma-separated")
    parser.add_argument("--jobs", type=int, default=30_000, help="tasks drained per run")
    parser.add_argument("--reps", type=int, default=3, help="repetitions (medians)")
    parser.add_argument("--window", type=float, default=20.0, help="idle seconds measured")
    parser.add_argument("--settle", type=float, default=5.0,
                        help="seconds the idle worker runs before it is measured")
    parser.add_argument("--max-connections", type=int, default=MAX_CONNECTIONS,
                        help="the worker's Redis connection pool, ?max_connections= in its "
                             "REDIS_URL (0: redis-py's default, 100 in redis-py 8)")
    parser.add_argument("--smoke", action="store_true", help="small and quick, exactly-once")
    args = parser.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",")]
    if args.smoke:
        args.sizes, args.jobs, args.reps, args.window, args.settle = [1, 3], 600, 1, 2.0, 1.0
    return args


def header(ctx: measure.Context) -> str:
    server = ctx.client.info("server")
    return (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; Python "
            f"{platform.python_version()}, Django {version('django')}, django-taskrunner "
            f"{version('django-taskrunner')}, redis-py {version('redis')}, Redis "
            f"{server['redis_version']}; worker pool max_connections "
            f"{os.environ.get('BENCH_MAX_CONNECTIONS', 'default')}; "
            f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    procs.pin_self(procs.LOAD_CPU)
    with procs.private_redis("bench-queues-") as (workdir, url, redis_proc):
        os.environ.update(BENCH_REDIS_URL=url, BENCH_DB=str(Path(workdir) / "bench.sqlite3"),
                          DJANGO_SETTINGS_MODULE="djsite.settings")
        if args.max_connections:  # bench/djsite/settings.py puts it in REDIS_URL (workers too)
            os.environ["BENCH_MAX_CONNECTIONS"] = str(args.max_connections)
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)  # the leader's outbox reads its table
        ctx = measure.Context(url=url, redis_proc=redis_proc, jobs=args.jobs, latency_jobs=0,
                              idle_jobs=0, smoke=args.smoke, timeout=max(300.0, args.jobs / 100),
                              workdir=workdir)
        try:
            print(header(ctx), file=sys.stderr, flush=True)
            results = run_all(ctx, args)
            print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}",
                  file=sys.stderr)
        except measure.BenchError as exc:
            log = Path(workdir) / "worker.log"
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            print(f"FAILED: {exc}\n--- worker output ---\n{tail}", file=sys.stderr)
            return 1
    print(main_table(results))
    print()
    print(command_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
