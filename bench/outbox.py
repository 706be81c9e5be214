"""The transactional outbox: what it costs a view that saves one row and dispatches one
task on commit, on PostgreSQL.

    taskset -c 0,1 python bench/outbox.py                     # 2,000 transactions, 5 reps
    python bench/outbox.py --transactions 500 --reps 1         # a quick look
    BENCH_DATABASE_URL=postgres://user@host:5432/name python bench/outbox.py

Each repetition runs the same "view" (one `transaction.atomic()`: one INSERT of a row,
one `dispatch_on_commit()` of a no-op task) `--transactions` times in each of three
modes, in blocks of `--block` (50) taking turns, the order rotating from one block to
the next, so that the noise of a shared machine falls on the three alike:

- `save only`: the row, no dispatch (what the database alone costs);
- `on-commit`: `TASKRUNNER["OUTBOX"] = False`, the dispatch sent by an on-commit callback
  (one pipelined HSET + EXPIRE + XADD after the COMMIT);
- `outbox`: the default: an INSERT into the outbox in the transaction, then, after the
  COMMIT, one `enqueue.lua` call and the row's DELETE (its own transaction, committed
  with `synchronous_commit` off: see `core/outbox.py`).

It prints transactions per second of each mode and repetition, their medians, and the
outbox's cost against the on-commit dispatch. Redis is a private `redis-server` this
script starts; the database is PostgreSQL (`BENCH_DATABASE_URL`, created if missing).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchlib import procs  # noqa: E402

DEFAULT_DATABASE = "postgres://postgres@127.0.0.1:5432/tr_outbox"
MODES = ("save only", "on-commit", "outbox")


def configure(database_url: str, redis_url: str) -> None:
    """Django settings for this process: PostgreSQL, the private Redis, the app."""
    import django
    from django.conf import settings

    parsed = urlsplit(database_url)
    settings.configure(
        SECRET_KEY="bench-only-not-secret", USE_TZ=True,  # noqa: S106
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth",
                        "django_taskrunner"],
        DATABASES={"default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parsed.path.lstrip("/")) or "tr_outbox",
            "USER": unquote(parsed.username or ""), "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "", "PORT": str(parsed.port or ""),
        }},
        TASKRUNNER={"REDIS_URL": redis_url, "PREFIX": "bench"},
        LOGGING={"version": 1, "disable_existing_loggers": False,
                 "loggers": {"django_taskrunner": {"level": "WARNING"}}},
    )
    django.setup()


def ensure_database(database_url: str) -> None:
    """CREATE DATABASE when it does not exist yet (through the `postgres` database)."""
    import psycopg

    parsed = urlsplit(database_url)
    name = unquote(parsed.path.lstrip("/")) or "tr_outbox"
    admin_url = parsed._replace(path="/postgres").geturl()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not found:
            conn.execute(f'CREATE DATABASE "{name}"')


def run_block(mode: str, count: int, start: int, noop: Any) -> float:
    """`count` view-like transactions in `mode`; the seconds they took."""
    from django.contrib.auth.models import Group
    from django.db import transaction
    from django.test.utils import override_settings

    from django_taskrunner import dispatch_on_commit

    with override_settings(TASKRUNNER={"REDIS_URL": os.environ["BENCH_REDIS_URL"],
                                       "PREFIX": "bench", "OUTBOX": mode == "outbox"}):
        dispatch_on_commit(noop, {"warm": True})  # the client, scripts and settings built
        began = time.perf_counter()
        for n in range(start, start + count):
            with transaction.atomic():
                Group.objects.create(name=f"bench-{n}")
                if mode != "save only":
                    dispatch_on_commit(noop, {"n": n})
        return time.perf_counter() - began


def run_rep(count: int, block: int, start: int, noop: Any) -> dict[str, float]:
    """`count` transactions per mode, in blocks of `block` taking turns (the order
    rotating), so that the load of a shared machine falls on the three alike; the
    transactions per second of each mode."""
    spent = dict.fromkeys(MODES, 0.0)
    for index in range(max(1, count // block)):
        for mode in MODES[index % 3:] + MODES[:index % 3]:
            spent[mode] += run_block(mode, block, start, noop)
            start += block
    return {mode: (count // block) * block / seconds for mode, seconds in spent.items()}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transactions", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--block", type=int, default=50,
                        help="transactions of one mode before the next mode's turn")
    args = parser.parse_args(argv)
    database_url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE)
    with procs.private_redis("bench-outbox-") as (_, redis_url, _):
        os.environ["BENCH_REDIS_URL"] = redis_url
        ensure_database(database_url)
        configure(database_url, redis_url)
        from django.contrib.auth.models import Group
        from django.core.management import call_command

        from django_taskrunner import task
        from django_taskrunner.models import OutboxMessage
        from django_taskrunner.store.connection import get_redis

        call_command("migrate", verbosity=0)

        @task(name="bench.outbox_noop")
        def noop(payload: Any) -> None:
            """Never run here: the benchmark measures the dispatch."""

        rates: dict[str, list[float]] = {mode: [] for mode in MODES}
        for rep in range(args.reps):
            Group.objects.filter(name__startswith="bench-").delete()
            get_redis().flushall()
            figures = run_rep(args.transactions, args.block, rep * 3 * args.transactions, noop)
            for mode in MODES:
                rates[mode].append(figures[mode])
            print(f"rep {rep + 1}: " + "  ".join(f"{mode} {figures[mode]:7,.0f}/s"
                                               for mode in MODES), flush=True)
            if OutboxMessage.objects.exists():
                raise SystemExit("outbox rows were left behind: the fast path failed")
        print()
        medians = {mode: statistics.median(values) for mode, values in rates.items()}
        for mode in MODES:
            values = rates[mode]
            print(f"{mode:>9}: median {medians[mode]:8,.0f} transactions/s "
                  f"(min {min(values):,.0f}, max {max(values):,.0f}; "
                  f"{1e6 / medians[mode]:,.0f} us per transaction)")
        ratio = medians["outbox"] / medians["on-commit"]
        extra_us = 1e6 / medians["outbox"] - 1e6 / medians["on-commit"]
        print(f"outbox vs on-commit: {ratio:.2f}x the transactions/s ({ratio - 1:+.0%}; "
              f"{extra_us:+,.0f} us per transaction)")
        Group.objects.filter(name__startswith="bench-").delete()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
