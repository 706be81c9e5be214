"""A real Django task, side by side: each task inserts one row through the ORM on
PostgreSQL and reads it back by primary key (`benchlib/orm_job.py`, one function for
every system).

    taskset -c 0,1 python bench/orm.py              # 3,000 tasks, 3 reps; updates the docs
    python bench/orm.py --smoke                     # 100 tasks, 1 rep; checks exactly-once

Starts a private redis-server, creates (and drops at the end) its own database on the
PostgreSQL server named by --pg-host/--pg-port/--pg-user (default 127.0.0.1:5432,
postgres), and for each `CONN_MAX_AGE` (600, and unset: Django's default) runs each
system in turn, repeating the round: the tasks are queued, the worker is started on CPU 1
and timed from the first row inserted to the last; then the rows are checked (every task
number once, none twice) and emptied. A plain loop doing only the ORM work in one process
is the floor: what a system costs on top of it is the runner's own cost.

Figures per task: *drain* (tasks/s), *worker CPU* (the worker process and its children,
user + system), *PostgreSQL CPU* (from /proc: the backends connected to the benchmark's
database; when the system opened connections during the drain, plus the CPU of backends
that exited meanwhile, which the postmaster collects for the whole server, so other
databases' backends that exit meanwhile count too), and *connections* opened per task
(`pg_stat_database.sessions`).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil  # noqa: E402
import psycopg  # noqa: E402
import redis  # noqa: E402
from benchlib import procs, report  # noqa: E402
from benchlib.systems import TASKRUNNER_WORKER  # noqa: E402

DOCS = procs.ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- orm:begin -->", "<!-- orm:end -->"
TABLE = "benchapp_benchrow"
TASKS_DB_SITE = "djsite.tasksdb_settings"  # the site with django-tasks-db's app and TASKS
TASKS_DB_TABLE = "django_tasks_database_dbtaskresult"  # its queue, emptied between drains
CONN_MODES = ("600", "")  # CONN_MAX_AGE: 600 s, and unset


class BenchError(RuntimeError):
    """A system did not finish its tasks, or ran one twice."""


@dataclass(frozen=True)
class OrmSystem:
    """One worker set-up; `producer` names the sender in `benchlib.producer` (None: the
    plain loop, which makes its own work)."""

    key: str
    label: str
    producer: str | None
    worker: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    package: str | None = None  # needed to run it at all
    peer: bool = False


SYSTEMS = [
    OrmSystem("loop", "plain loop, ORM work only", None, ("-m", "benchlib.orm_loop")),
    OrmSystem("taskrunner1", "django-taskrunner -c1", "taskrunner",
              (*TASKRUNNER_WORKER, "--concurrency", "1")),
    OrmSystem("taskrunner", "django-taskrunner, runtasks defaults", "taskrunner",
              TASKRUNNER_WORKER),
    OrmSystem("dramatiq", "Dramatiq (1 process, 8 threads)", "dramatiq",
              ("-m", "dramatiq", "benchlib.peer_apps.dramatiq_tasks", "--processes", "1",
               "--threads", "8"), package="dramatiq", peer=True),
    OrmSystem("huey", "Huey (2 threads)", "huey",
              ("-m", "huey.bin.huey_consumer", "benchlib.peer_apps.huey_tasks.huey", "-w", "2",
               "-k", "thread", "-q"), package="huey", peer=True),
    OrmSystem("celery", "Celery (solo pool)", "celery",
              ("-m", "celery", "-A", "benchlib.peer_apps.celery_app", "worker", "--pool",
               "solo", "--concurrency", "1", "-Q", "bench", "--without-heartbeat",
               "--without-gossip", "--without-mingle", "--loglevel", "WARNING"),
              package="celery", peer=True),
    OrmSystem("celery_reuse", "Celery (solo pool), CELERY_DB_REUSE_MAX=1000", "celery",
              ("-m", "celery", "-A", "benchlib.peer_apps.celery_app", "worker", "--pool",
               "solo", "--concurrency", "1", "-Q", "bench", "--without-heartbeat",
               "--without-gossip", "--without-mingle", "--loglevel", "WARNING"),
              env={"BENCH_CELERY_DB_REUSE_MAX": "1000"}, package="celery", peer=True),
    OrmSystem("rq", "RQ (SimpleWorker)", "rq", ("-m", "benchlib.peer_apps.rq_tasks"),
              package="rq", peer=True),
    # django-tasks' database backend: its queue is a table of the same database.
    OrmSystem("tasksdb", "django-tasks-db (db_worker)", "tasksdb",
              ("-m", "django", "db_worker"), env={"DJANGO_SETTINGS_MODULE": TASKS_DB_SITE},
              package="django-tasks-db", peer=True),
]
BY_KEY = {s.key: s for s in SYSTEMS}
METRICS = [("drain", "drain (tasks/s)", True), ("worker_cpu", "worker CPU (µs/task)", False),
           ("pg_cpu", "PostgreSQL CPU (µs/task)", False),
           ("connections", "connections opened per task", False)]
Results = dict[str, dict[str, dict[str, list[float]]]]  # conn mode -> system -> metric -> reps


def available(system: OrmSystem) -> bool:
    if system.package is None:
        return True
    try:
        importlib.metadata.version(system.package)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3000, help="tasks per drain (default 3000)")
    parser.add_argument("--reps", type=int, default=3, help="interleaved repetitions (default 3)")
    parser.add_argument("--systems", default=",".join(BY_KEY),
                        help=f"comma-separated subset of {','.join(BY_KEY)}")
    parser.add_argument("--conn-max-age", default="600,unset",
                        help="CONN_MAX_AGE values to run, comma-separated (default 600,unset)")
    parser.add_argument("--pg-host", default=os.environ.get("BENCH_PG_HOST", "127.0.0.1"))
    parser.add_argument("--pg-port", default=os.environ.get("BENCH_PG_PORT", "5432"))
    parser.add_argument("--pg-user", default=os.environ.get("BENCH_PG_USER", "postgres"))
    parser.add_argument("--pg-name", default="tr_perf_bench",
                        help="database created (and dropped) by the run")
    parser.add_argument("--budget", type=float, default=15.0,
                        help="seconds of drain measured at most: a slower system is measured "
                             "on the tasks it ran by then, and checked for none run twice "
                             "(0: always drain all; default 15)")
    parser.add_argument("--verbose", action="store_true",
                        help="also print each block's Redis commands per task")
    parser.add_argument("--smoke", action="store_true",
                        help="100 tasks, one repetition; only exactly-once is checked")
    parser.add_argument("--no-write", action="store_true", help="do not update the docs")
    parser.add_argument("--profile", metavar="FILE",
                        help="run each worker under py-spy (collapsed stacks to FILE.KEY; "
                             "CPU figures then include py-spy's own); implies --no-write")
    args = parser.parse_args(argv)
    if args.profile:
        args.no_write = True
    args.modes = ["" if m == "unset" else m for m in args.conn_max_age.split(",")]
    if args.smoke:
        args.jobs, args.reps, args.no_write, args.budget = 100, 1, True, 0.0
    return args


def pg_dsn(args: argparse.Namespace, name: str) -> str:
    return f"host={args.pg_host} port={args.pg_port} user={args.pg_user} dbname={name}"


def create_database(args: argparse.Namespace) -> None:
    with psycopg.connect(pg_dsn(args, "postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{args.pg_name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{args.pg_name}"')


def drop_database(args: argparse.Namespace) -> None:
    try:
        with psycopg.connect(pg_dsn(args, "postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{args.pg_name}" WITH (FORCE)')
    except psycopg.Error as exc:
        print(f"could not drop {args.pg_name}: {exc}", file=sys.stderr)


def child_env(args: argparse.Namespace, url: str, mode: str, system: OrmSystem | None = None
              ) -> dict[str, str]:
    env = procs.child_env(url, BENCH_PG_NAME=args.pg_name, BENCH_PG_HOST=args.pg_host,
                          BENCH_PG_PORT=str(args.pg_port), BENCH_PG_USER=args.pg_user)
    env.pop("BENCH_CONN_MAX_AGE", None)
    env.pop("BENCH_CELERY_DB_REUSE_MAX", None)
    if mode:
        env["BENCH_CONN_MAX_AGE"] = mode
    if system is not None:
        env.update(system.env)
    return env


def migrate(args: argparse.Namespace, url: str, chosen: list[OrmSystem]) -> None:
    """The benchmark's tables, and django-tasks-db's when it runs (its site is a superset)."""
    env = child_env(args, url, "")
    if any(system.key == "tasksdb" for system in chosen):
        env["DJANGO_SETTINGS_MODULE"] = TASKS_DB_SITE
    out = subprocess.run(procs.python("-m", "django", "migrate", "--run-syncdb", "-v", "0"),
                         cwd=procs.BENCH_DIR, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise BenchError(f"migrate failed:\n{out.stdout}\n{out.stderr}")


def own_ticks(pid: int) -> float:
    """User + system CPU seconds of one process (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:13]) / os.sysconf("SC_CLK_TCK")


def children_ticks(pid: int) -> float:
    """CPU seconds of the children a process has reaped (the postmaster: exited backends)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[13:15]) / os.sysconf("SC_CLK_TCK")


class PgMonitor:
    """Counts the rows and reads the CPU of the database's backends, from one connection."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.conn = psycopg.connect(pg_dsn(args, args.pg_name), autocommit=True)
        self.own_pid = self.conn.info.backend_pid
        self.name = args.pg_name
        self.postmaster = self._postmaster()

    def _postmaster(self) -> int | None:
        """The postmaster (the parent of our backend), if its /proc entry is readable."""
        try:
            return psutil.Process(self.own_pid).ppid()
        except psutil.Error:
            return None

    def rows(self) -> int:
        return int(self.conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone()[0])  # noqa: S608

    def check(self, n: int) -> tuple[int, int, int | None, int | None]:
        query = f"SELECT count(*), count(DISTINCT n), min(n), max(n) FROM {TABLE}"  # noqa: S608
        row = self.conn.execute(query).fetchone()
        return row[0], row[1], row[2], row[3]

    def empty(self) -> None:
        """No rows, and no task left in django-tasks-db's queue (a drain cut short)."""
        has_queue = self.conn.execute("SELECT to_regclass(%s)", (TASKS_DB_TABLE,)).fetchone()[0]
        tables = f"{TABLE}, {TASKS_DB_TABLE}" if has_queue else TABLE
        self.conn.execute(f"TRUNCATE {tables} RESTART IDENTITY")

    def sessions(self) -> int:
        return int(self.conn.execute("SELECT sessions FROM pg_stat_database WHERE datname = %s",
                                     (self.name,)).fetchone()[0])

    def backends(self) -> dict[int, float]:
        pids = [r[0] for r in self.conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> %s",
            (self.name, self.own_pid))]
        found = {}
        for pid in pids:
            try:
                found[pid] = own_ticks(pid)
            except OSError:
                pass
        return found

    def snapshot(self) -> tuple[dict[int, float], float, int]:
        reaped = children_ticks(self.postmaster) if self.postmaster else 0.0
        return self.backends(), reaped, self.sessions()

    def close(self) -> None:
        self.conn.close()


def wait_rows(monitor: PgMonitor, target: int, deadline: float, poll: float) -> int:
    while True:
        count = monitor.rows()
        if count >= target:
            return count
        if time.monotonic() > deadline:
            raise BenchError(f"only {count} of {target} tasks finished in time")
        time.sleep(poll)


def produce(args: argparse.Namespace, url: str, mode: str, system: OrmSystem) -> None:
    argv = procs.python("-m", "benchlib.producer", str(system.producer), "plain",
                        str(args.jobs), "--job", "orm")
    proc = procs.spawn(argv, cpu=procs.LOAD_CPU, env=child_env(args, url, mode, system),
                       stdout=subprocess.PIPE)
    try:
        out, _ = proc.communicate(timeout=max(120, args.jobs / 50))
    finally:
        procs.kill(proc)
    if proc.returncode != 0:
        raise BenchError(f"producer {system.producer} failed:\n{out.decode(errors='replace')}")


def block(args: argparse.Namespace, url: str, mode: str, system: OrmSystem, monitor: PgMonitor,
          workdir: str) -> dict[str, float]:
    """Queue N tasks, start the worker, time the drain, check the rows, kill the worker."""
    client = redis.Redis.from_url(url)
    client.flushall()
    monitor.empty()
    if system.producer is not None:
        produce(args, url, mode, system)
    argv = procs.python(*system.worker, *([str(args.jobs)] if system.producer is None else []))
    if args.profile:
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        # py-spy on the load CPU, the worker (exec'd by taskset) on its own; --gil: only
        # samples of the thread holding the GIL, that is Python running, not waiting.
        worker_cpu = str(procs.WORKER_CPU)
        argv = [spy, "record", "--gil", "-r", "250", "-f", "raw", "-o",
                f"{args.profile}.{system.key}", "--", "taskset", "-c", worker_cpu, *argv]
    log_path = f"{workdir}/{system.key}.log"
    with open(log_path, "ab") as log:
        worker = procs.spawn(argv, cpu=procs.LOAD_CPU if args.profile else procs.WORKER_CPU,
                             env=child_env(args, url, mode, system), stdout=log.fileno())
    timeout = 60.0 if args.smoke else max(120.0, args.jobs / 20)
    try:
        deadline = time.monotonic() + timeout
        first = wait_rows(monitor, 1, deadline, 0.0005)
        t1, w1 = time.perf_counter(), procs.cpu_seconds(worker.pid)
        b1, reaped1, s1 = monitor.snapshot()
        c1 = client.info("commandstats")
        cut = False
        try:
            last = wait_rows(monitor, args.jobs, min(deadline, time.monotonic() + args.budget)
                             if args.budget else deadline, 0.002)
        except BenchError:
            if not args.budget or time.monotonic() > deadline:
                raise
            last, cut = monitor.rows(), True
        t2, w2 = time.perf_counter(), procs.cpu_seconds(worker.pid)
        b2, reaped2, s2 = monitor.snapshot()
        c2 = client.info("commandstats")
        if cut:  # measured on the tasks it ran by then: none of those may have run twice
            procs.kill(worker)
            count, distinct, low, high = monitor.check(args.jobs)
            if count != distinct:
                raise BenchError(f"{system.label}: {count} rows, {distinct} distinct task "
                                 "numbers: a task ran twice")
        else:
            time.sleep(0.3)  # a duplicate run would show up meanwhile
            count, distinct, low, high = monitor.check(args.jobs)
            if (count, distinct, low, high) != (args.jobs, args.jobs, 0, args.jobs - 1):
                raise BenchError(f"{system.label}: {count} rows for {args.jobs} tasks, "
                                 f"{distinct} distinct, numbers {low}..{high}: not exactly once")
    except BenchError as exc:
        with open(log_path, "rb") as log:
            tail = log.read()[-3000:].decode(errors="replace")
        raise BenchError(f"{exc}\n--- {system.label} worker output ---\n{tail}") from None
    finally:
        if args.profile:  # py-spy writes its stacks once the worker it runs has ended
            for child in psutil.Process(worker.pid).children():
                child.send_signal(signal.SIGTERM)
            worker.wait(60)
        procs.kill(worker)
    tasks = max(1, last - first)
    calls = {name: stats["calls"] - c1.get(name, {}).get("calls", 0) for name, stats in c2.items()}
    if args.verbose:
        print(f"  {system.key}: Redis calls per task: " + ", ".join(
            f"{name.removeprefix('cmdstat_')} {n / tasks:.2f}" for name, n in
            sorted(calls.items(), key=lambda kv: -kv[1]) if n), file=sys.stderr)
    # The backends of the benchmark's database that lived through the drain; plus, when
    # it opened connections, the CPU of exited backends (which the postmaster collects
    # for every database of the server: other work on a shared server shows up there).
    pg = sum(cpu - b1.get(pid, 0.0) for pid, cpu in b2.items())
    if s2 > s1:
        pg += reaped2 - reaped1
    return {"drain": tasks / (t2 - t1), "worker_cpu": (w2 - w1) / tasks * 1e6,
            "pg_cpu": pg / tasks * 1e6, "connections": (s2 - s1) / tasks, "cut": float(cut),
            "redis_calls": sum(calls.values()) / tasks}


def run(args: argparse.Namespace, workdir: str, chosen: list[OrmSystem]) -> Results:
    redis_proc, url = procs.start_redis(workdir)
    create_database(args)
    results: Results = {}
    try:
        migrate(args, url, chosen)
        monitor = PgMonitor(args)
        try:
            for rep in range(1, args.reps + 1):
                for mode in args.modes:
                    for system in chosen:
                        started = time.monotonic()
                        figures = block(args, url, mode, system, monitor, workdir)
                        slot = results.setdefault(mode, {}).setdefault(system.key, {})
                        for metric, value in figures.items():
                            slot.setdefault(metric, []).append(value)
                        print(f"[{rep}/{args.reps}] CONN_MAX_AGE={mode or 'unset':5s} "
                              f"{system.key:13s} {time.monotonic() - started:5.1f}s  "
                              + "  ".join(f"{k}={v:,.2f}" for k, v in figures.items()),
                              file=sys.stderr, flush=True)
        finally:
            monitor.close()
    finally:
        procs.kill(redis_proc)
        drop_database(args)
    return results


def med(values: list[float]) -> float:
    return statistics.median(values)


def table(results: Results, mode: str) -> str:
    by_system = results.get(mode, {})
    loop = by_system.get("loop", {})
    header = ["system", "drain (tasks/s)", "worker CPU (µs/task)", "÷ plain loop",
              "PostgreSQL CPU (µs/task)", "connections per task"]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for key, figures in by_system.items():
        cpu = med(figures["worker_cpu"])
        ratio = f"{cpu / med(loop['worker_cpu']):.2f}×" if loop else ""
        spread = f"{min(figures['drain']):,.0f}–{max(figures['drain']):,.0f}"
        cuts = int(sum(figures.get("cut", [])))
        mark = f" ({cuts} of {len(figures['drain'])} cut short)" if cuts else ""
        lines.append(f"| {BY_KEY[key].label}{mark} | {med(figures['drain']):,.0f} ({spread}) | "
                     f"{cpu:,.0f} | {ratio} | {med(figures['pg_cpu']):,.0f} | "
                     f"{med(figures['connections']):.2f} |")
    return "\n".join(lines)


# The runner's own CPU per task on top of the ORM work, at most (the performance issue's
# third round; ahead of every peer on drain and worker CPU too).
OWN_GOAL = 0.15


def targets(results: Results) -> str:
    """The issue's targets for this workload, each figure with met or missed."""
    lines = ["| target | CONN_MAX_AGE | measured | goal | |", "|---|---|---|---|---|"]
    for mode in results:
        by = results[mode]
        shown = mode or "unset"
        if "loop" in by:
            loop = med(by["loop"]["worker_cpu"])
            for key in ("taskrunner1", "taskrunner"):
                if key in by:
                    own = (med(by[key]["worker_cpu"]) - loop) / loop
                    lines.append(f"| {BY_KEY[key].label}: own CPU on top of the ORM work | "
                                 f"{shown} | {own:+.0%} | ≤ {OWN_GOAL:.0%} | "
                                 f"{'met' if own <= OWN_GOAL else '**missed**'} |")
        peers = [k for k in by if BY_KEY[k].peer]
        for key in ("taskrunner1", "taskrunner"):
            if key not in by or not peers:
                continue
            for metric, name, higher in METRICS[:2]:  # drain and worker CPU
                best = (max if higher else min)(med(by[p][metric]) for p in peers)
                ours = med(by[key][metric])
                ok = ours >= best if higher else ours <= best
                lines.append(f"| {BY_KEY[key].label}: {name} ahead of every peer | {shown} | "
                             f"{ours:,.0f} vs {best:,.0f} | {'≥' if higher else '≤'} best peer | "
                             f"{'met' if ok else '**missed**'} |")
    return "\n".join(lines)


def versions(args: argparse.Namespace) -> str:
    with psycopg.connect(pg_dsn(args, "postgres")) as conn:
        server = conn.execute("SHOW server_version").fetchone()[0].split()[0]
    names = ["Django", "psycopg", "celery", "dramatiq", "huey", "rq", "django-tasks-db"]
    parts = [f"Python {platform.python_version()}", f"PostgreSQL {server}"]
    for name in names:
        try:
            parts.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            parts.append(f"{name} not installed")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=procs.ROOT,
                            capture_output=True, text=True).stdout.strip() or "?"
    return ", ".join([*parts, f"django-taskrunner ({commit})"])


def section(args: argparse.Namespace, results: Results, argv: list[str],
            skipped: list[str]) -> str:
    command = " ".join(["taskset -c 0,1 python bench/orm.py",
                        *[a for a in argv if a != "--no-write"]])
    out = [f"Run of {datetime.date.today().isoformat()}: `{command}` — {args.jobs} tasks per "
           f"drain, {args.reps} interleaved repetitions, {os.cpu_count()} CPUs (Redis and the "
           "producers on CPU 0, the worker on CPU 1, PostgreSQL unpinned); the machine's "
           f"load average over the last 15 minutes was {os.getloadavg()[2]:.1f} at the end.",
           "", f"Versions: {versions(args)}.", ""]
    if skipped:
        out += [f"Not run: {'; '.join(skipped)}.", ""]
    for mode in results:
        out += [f"`CONN_MAX_AGE` {mode or 'unset (0, the default)'}; medians (min–max of the "
                "drain):", "", table(results, mode), ""]
    out += ["Targets, from the same run:", "", targets(results), ""]
    return "\n".join(out)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    wanted = args.systems.split(",")
    chosen = [s for s in SYSTEMS if s.key in wanted and available(s)]
    skipped = [f"{s.label} ({s.package} is not installed)"
               for s in SYSTEMS if s.key in wanted and not available(s) and s.package]
    for reason in skipped:
        print(f"skipped: {reason}", file=sys.stderr)
    try:
        with psycopg.connect(pg_dsn(args, "postgres"), connect_timeout=3):
            pass
    except psycopg.Error as exc:
        print(f"no PostgreSQL at {args.pg_host}:{args.pg_port}: {exc}", file=sys.stderr)
        return 3
    procs.pin_self(procs.LOAD_CPU)
    workdir = tempfile.mkdtemp(prefix="bench-orm-")
    started = time.monotonic()
    try:
        results = run(args, workdir, chosen)
    except BenchError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    text = section(args, results, argv, skipped)
    print(text)
    print(f"total time: {time.monotonic() - started:.0f}s", file=sys.stderr)
    if args.smoke:
        print("smoke: every system ran every task exactly once")
    if not args.no_write:
        report.write_section(DOCS, text, begin=BEGIN, end=END, title="A real Django task")
        print(f"written to {DOCS.relative_to(procs.ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
