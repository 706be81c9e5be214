"""How cost grows with the work: each figure at 1x, 10x and 100x (bench/NOTES.md,
"How cost grows").

    python bench/growth.py failed  [--sizes 10000,100000,1000000]   # FailedTask admin, PostgreSQL
    python bench/growth.py failed --db sqlite [--sizes 10000,100000] # the same on SQLite
    python bench/growth.py queues  [--sizes 1,10,100]                # queues of one worker, idle
    python bench/growth.py workers [--sizes 1,10,50]                 # idle workers on one Redis
    ... --smoke                                                      # small sizes, quick

Every subcommand starts what it needs (a private redis-server, its own PostgreSQL
database, real `runtasks` processes), prints one Markdown table and leaves nothing behind.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from benchlib import procs  # noqa: E402

Table = list[list[str]]


def markdown(header: list[str], rows: Table) -> str:
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def timed(call: Callable[[], object], repeat: int) -> float:
    """Median milliseconds of `repeat` calls, after one warm-up call."""
    call()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


# ---------------------------------------------------------------- failed rows (admin)

FILL_SQL = """
INSERT INTO django_taskrunner_failedtask
    (task_name, queue, message_id, dispatch_token, payload, error_class, error, traceback,
     attempts, worker, failed_at)
SELECT 'shop.tasks.task_' || (n %% 12), (ARRAY['default', 'mail'])[n %% 2 + 1],
       'msg-' || n, '', '{"order": ' || n || ', "email": "customer-' || n || '@example.com"}',
       'shop.errors.Error' || (n %% 7), 'Error' || (n %% 7) || ': order ' || n || ' failed',
       %(traceback)s, 3, 'web-1-1234', now() - n * interval '7 seconds'
FROM generate_series(%(start)s, %(stop)s - 1) AS n
"""
# The same rows on SQLite: a recursive CTE for generate_series, datetime() for now().
SQLITE_FILL_SQL = """
INSERT INTO django_taskrunner_failedtask
    (task_name, queue, message_id, dispatch_token, payload, error_class, error, traceback,
     attempts, worker, failed_at)
WITH RECURSIVE s(n) AS (SELECT %(start)s UNION ALL SELECT n + 1 FROM s WHERE n + 1 < %(stop)s)
SELECT 'shop.tasks.task_' || (n %% 12), CASE n %% 2 WHEN 0 THEN 'default' ELSE 'mail' END,
       'msg-' || n, '', '{"order": ' || n || ', "email": "customer-' || n || '@example.com"}',
       'shop.errors.Error' || (n %% 7), 'Error' || (n %% 7) || ': order ' || n || ' failed',
       %(traceback)s, 3, 'web-1-1234', datetime('now', '-' || (n * 7) || ' seconds')
FROM s
"""
TRACEBACK = "".join(f'  File "/srv/shop/tasks.py", line {n}, in step_{n}\n    do_it()\n'
                    for n in range(20)) + "ValueError: the mail server said no\n"


def failed_pages(size: int) -> list[tuple[str, str]]:
    base = "/admin/django_taskrunner/failedtask/"
    middle, page = size // 2, max(1, min(10, size // 100))
    pages = [
        ("failed list, first page", base),
        (f"failed list, page {page}", f"{base}?p={page}"),
    ]
    if size >= 20_000:  # past the paginator's count cap (10,000 rows from the page)
        pages.append(("failed list, page 150 (past the count cap)", f"{base}?p=150"))
    return pages + [
        ("filter: one task name (1 row in 12)", f"{base}?task_name=shop.tasks.task_5"),
        ("filter: error class and queue (1 in 14)",
         f"{base}?error_class=shop.errors.Error3&queue=mail"),
        ("search: error text (1 row in 7)", f"{base}?q=Error3"),
        ("search: a message id (one row)", f"{base}?q=msg-{middle}"),
        ("search: an e-mail in the payload (one row)", f"{base}?q=customer-{middle + 1}@"),
    ]


def fill_failed(connection, start: int, stop: int) -> None:  # type: ignore[no-untyped-def]
    """Rows `start` to `stop` - 1, then the statistics (and, on PostgreSQL, the visibility
    map a table that autovacuum keeps up with has)."""
    sql = FILL_SQL if connection.vendor == "postgresql" else SQLITE_FILL_SQL
    with connection.cursor() as cursor:
        cursor.execute(sql, {"traceback": TRACEBACK, "start": start, "stop": stop})
        if connection.vendor == "postgresql":
            cursor.execute("VACUUM ANALYZE django_taskrunner_failedtask")
        else:
            cursor.execute("ANALYZE")


def explain(connection, queries: list[dict[str, str]]) -> None:  # type: ignore[no-untyped-def]
    """Each SELECT of a page with its plan: EXPLAIN ANALYZE (PostgreSQL), QUERY PLAN (SQLite)."""
    prefix = "EXPLAIN (ANALYZE, BUFFERS) " if connection.vendor == "postgresql" else \
        "EXPLAIN QUERY PLAN "
    for query in queries:
        sql = query["sql"]
        if not sql.lstrip().upper().startswith(("SELECT", "WITH")) or "django_session" in sql:
            continue
        with connection.cursor() as cursor:
            cursor.execute(prefix + sql.replace("%", "%%"))
            plan = "\n    ".join(" ".join(str(c) for c in row) for row in cursor.fetchall())
        print(f"  {float(query['time']) * 1000:.1f} ms: {sql[:400]}\n    {plan}",
              file=sys.stderr)


def measure_failed(args: argparse.Namespace) -> list[tuple[int, str, float, float, int]]:
    """(size, page, median ms, SQL ms, queries) of each page at each size."""
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    call_command("migrate", verbosity=0)
    User.objects.create_superuser("root", password="bench")  # noqa: S106 - throwaway DB
    client = Client()
    client.login(username="root", password="bench")  # noqa: S106
    results, filled = [], 0
    for size in args.sizes:
        started = time.monotonic()
        fill_failed(connection, filled, size)
        filled = size
        print(f"{size:,} rows written in {time.monotonic() - started:.0f}s", file=sys.stderr)
        for label, page in failed_pages(size):
            def get(page: str = page) -> None:
                response = client.get(page)
                assert response.status_code == 200, (page, response.status_code)
            ms = timed(get, args.repeat)
            with CaptureQueriesContext(connection) as queries:
                get()
            sql_ms = sum(float(q["time"]) for q in queries.captured_queries) * 1000
            results.append((size, label, ms, sql_ms, len(queries.captured_queries)))
            print(f"{size:,} | {label} | {ms:,.0f} ms | SQL {sql_ms:,.0f} ms | "
                  f"{len(queries.captured_queries)} queries", file=sys.stderr, flush=True)
            if args.verbose:
                explain(connection, queries.captured_queries)
    connection.close()
    return results


def failed_tables(results: list[tuple[int, str, float, float, int]], db: str,
                  wide: bool) -> str:
    """A row per size and page; with `wide`, first the same as one column per size (on
    stderr, the layout of bench/NOTES.md)."""
    sizes = sorted({size for size, *_ in results})
    if wide:
        cells = {(size, label): f"{ms:,.0f} / {sql:,.0f}" + ("" if ms < 300 else " **missed**")
                 for size, label, ms, sql, _ in results}
        table = [[label, *(cells.get((size, label), "") for size in sizes)]
                 for label, _ in failed_pages(sizes[-1])]
        print(markdown(["page (page ms / of it SQL ms)", *(f"{s:,} rows" for s in sizes)],
                       table), file=sys.stderr)
    rows = [[f"{size:,}", db, label, f"{ms:,.0f}", f"{sql:,.0f}",
             "met" if ms < 300 else "**missed**"] for size, label, ms, sql, _ in results]
    return markdown(["FailedTask rows", "database", "page", "median ms", "of it SQL ms",
                     "< 300 ms"], rows)


def cmd_failed(args: argparse.Namespace) -> str:
    name, dsn = args.pg_name, f"host={args.pg_host} port={args.pg_port} user={args.pg_user}"
    if args.db == "postgresql":
        import psycopg

        with psycopg.connect(f"{dsn} dbname=postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        os.environ.update(BENCH_PG_NAME=name, BENCH_PG_HOST=args.pg_host,
                          BENCH_PG_PORT=str(args.pg_port), BENCH_PG_USER=args.pg_user)
    try:
        with procs.private_redis("bench-growth-") as (workdir, url, _):
            os.environ.update(BENCH_REDIS_URL=url, BENCH_DIR=workdir,
                              DJANGO_SETTINGS_MODULE="bench.admin_site.settings")
            return failed_tables(measure_failed(args), args.db, wide=not args.smoke)
    finally:  # the database last, once the server and its folder are gone
        if args.db == "postgresql":
            with psycopg.connect(f"{dsn} dbname=postgres", autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# ---------------------------------------------------------------- idle workers and queues

def idle_figures(args: argparse.Namespace, workers: int, queues: int) -> dict[str, float]:
    """Start `workers` runtasks processes, each reading `queues` empty queues; after they
    settle, Redis commands per second, Redis CPU and the workers' CPU over `--window` s."""
    import psutil
    import redis
    from benchlib.systems import TASKRUNNER_WORKER

    with procs.private_redis("bench-growth-") as (workdir, url, _):
        env = procs.child_env(url, BENCH_DB=str(Path(workdir) / "bench.sqlite3"))
        names = [arg for n in range(queues) for arg in ("--queue", f"q{n}")]
        started = []
        try:
            for n in range(workers):
                started.append(procs.spawn(procs.python(*TASKRUNNER_WORKER, *names,
                                                        "--consumer-name", f"idle-{n}"),
                                           cpu=procs.WORKER_CPU, env=env))
            client = redis.Redis.from_url(url)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # every worker has read every queue once
                groups = sum(len(client.xinfo_groups(key))
                             for key in client.scan_iter("*:stream"))
                clients = int(client.info("clients")["connected_clients"])
                if groups >= queues and clients > workers:
                    break
                time.sleep(0.5)
            time.sleep(args.settle)
            for proc in started:
                if proc.poll() is not None:
                    raise SystemExit(f"a worker exited with {proc.returncode}")

            def snap() -> tuple[float, int, float, float]:
                info = client.info()
                cpu = sum(procs.cpu_seconds(proc.pid) for proc in started)
                return (time.monotonic(), int(info["total_commands_processed"]),
                        float(info["used_cpu_sys"]) + float(info["used_cpu_user"]), cpu)

            t1, c1, r1, w1 = snap()
            time.sleep(args.window)
            t2, c2, r2, w2 = snap()
            seconds = t2 - t1
            rss = sum(psutil.Process(proc.pid).memory_info().rss for proc in started)
            return {"commands": (c2 - c1 - 2) / seconds,
                    "redis_cpu": (r2 - r1) / seconds * 100,
                    "worker_cpu": (w2 - w1) / seconds * 100, "rss_mb": rss / workers / 2**20}
        finally:
            for proc in started:
                procs.kill(proc)


def cmd_queues(args: argparse.Namespace) -> str:
    rows = []
    for size in args.sizes:
        f = idle_figures(args, 1, size)
        rows.append([str(size), f"{f['commands']:,.1f}", f"{f['redis_cpu']:.2f}%",
                     f"{f['worker_cpu']:.2f}%", f"{f['rss_mb']:.0f}"])
        print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    return markdown(["queues of one idle worker", "Redis commands/s", "Redis CPU",
                     "worker CPU", "worker RSS MB"], rows)


def cmd_workers(args: argparse.Namespace) -> str:
    rows = []
    for size in args.sizes:
        f = idle_figures(args, size, 1)
        rows.append([str(size), f"{f['commands']:,.1f}", f"{f['redis_cpu']:.2f}%",
                     f"{f['worker_cpu']:.2f}%", f"{f['commands'] / size:,.1f}"])
        print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    return markdown(["idle workers, one queue each", "Redis commands/s", "Redis CPU",
                     "the workers' CPU", "commands/s per worker"], rows)


SUBCOMMANDS = {"failed": cmd_failed, "queues": cmd_queues, "workers": cmd_workers}
DEFAULT_SIZES = {"failed": "10000,100000,1000000", "queues": "1,10,100", "workers": "1,10,50"}
SMOKE_SIZES = {"failed": "200,2000", "queues": "1,3", "workers": "1,2"}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=sorted(SUBCOMMANDS))
    parser.add_argument("--sizes", help="comma-separated sizes (the 1x, 10x, 100x)")
    parser.add_argument("--repeat", type=int, default=5, help="timed requests per page")
    parser.add_argument("--smoke", action="store_true", help="small sizes, quick")
    parser.add_argument("--verbose", action="store_true",
                        help="failed: print each query of a page with its EXPLAIN ANALYZE")
    parser.add_argument("--db", choices=("postgresql", "sqlite"), default="postgresql",
                        help="failed: the database the rows are in")
    parser.add_argument("--window", type=float, default=20.0,
                        help="seconds idle figures are measured over (default 20)")
    parser.add_argument("--settle", type=float, default=5.0,
                        help="seconds idle workers run before they are measured (default 5)")
    parser.add_argument("--pg-host", default=os.environ.get("BENCH_PG_HOST", "127.0.0.1"))
    parser.add_argument("--pg-port", default=os.environ.get("BENCH_PG_PORT", "5432"))
    parser.add_argument("--pg-user", default=os.environ.get("BENCH_PG_USER", "postgres"))
    parser.add_argument("--pg-name", default="tr_perf_growth",
                        help="database created (and dropped) by `failed`")
    args = parser.parse_args(argv)
    sizes = args.sizes or (SMOKE_SIZES if args.smoke else DEFAULT_SIZES)[args.what]
    args.sizes = [int(s) for s in sizes.split(",")]
    if args.smoke:
        args.repeat, args.window, args.settle = 1, 3.0, 1.0
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    procs.pin_self(procs.LOAD_CPU)
    started = time.monotonic()
    print(SUBCOMMANDS[args.what](args))
    print(f"total time: {time.monotonic() - started:.0f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
