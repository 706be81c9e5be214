"""The real-Django benchmark (bench/orm.py) in smoke mode: every system inserts every
task's row exactly once, and every figure of the table is produced.

Runs `bench/orm.py --smoke` as a real process: its own private Redis, real workers of
each library, a database of its own on the PostgreSQL server of
TASKRUNNER_TEST_DATABASE_URL (default 127.0.0.1:5432, user postgres), created and
dropped by the script. Figures are printed, never compared.
"""

from __future__ import annotations

import importlib.util
import os
import re
from urllib.parse import urlparse

import pytest

from tests.bench.bench_run import run_bench

NEEDED = ("celery", "rq", "dramatiq", "huey", "django_tasks_db", "psutil", "psycopg")
missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
URL = urlparse(os.environ.get("TASKRUNNER_TEST_DATABASE_URL")
               or "postgres://postgres@127.0.0.1:5432/tr_bench")
HOST, PORT, USER = URL.hostname or "127.0.0.1", str(URL.port or 5432), URL.username or "postgres"
NAME = f"{(URL.path.strip('/') or 'tr_bench')}_orm_smoke"
LABELS = ("plain loop, ORM work only", "django-taskrunner -c1",
          "django-taskrunner, runtasks defaults", "Dramatiq", "Huey", "Celery (solo pool) |",
          "CELERY_DB_REUSE_MAX", "RQ", "django-tasks-db (db_worker)")


def postgres_down() -> str | None:
    """Why PostgreSQL cannot be used, or None."""
    if importlib.util.find_spec("psycopg") is None:
        return "psycopg not installed"
    import psycopg

    try:
        with psycopg.connect(host=HOST, port=PORT, user=USER, dbname="postgres",
                             connect_timeout=3):
            return None
    except psycopg.Error as exc:
        return f"no PostgreSQL at {HOST}:{PORT} ({type(exc).__name__})"


pytestmark = [
    pytest.mark.skipif(bool(missing), reason=f"benchmark libraries not installed "
                       f"({', '.join(missing)}): pip install -e . --group bench"),
]


def test_every_system_inserts_every_row_exactly_once() -> None:
    down = postgres_down()
    if down:
        pytest.skip(down)
    # One mode (the other, CONN_MAX_AGE unset, is the same run with another setting):
    # every worker of every system starts once, not twice, in CI's time.
    code, out, _ = run_bench("orm.py", "--smoke", "--conn-max-age", "600", "--pg-host", HOST,
                             "--pg-port", PORT, "--pg-user", USER, "--pg-name", NAME,
                             timeout=600)
    assert code == 0, out
    assert "smoke: every system ran every task exactly once" in out
    assert "`CONN_MAX_AGE` 600" in out, "no table for `CONN_MAX_AGE` 600"
    # The rows of the figure table: a system and its five figures.
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in out.splitlines() if line.startswith("| ") and "tasks/s" not in line]
    rows = [cells for cells in rows if len(cells) == 6]
    for label in LABELS:
        found = [cells for cells in rows if label in f"{cells[0]} |"]
        assert len(found) == 1, f"{label}: not in the table\n{out}"
        for cells in found:
            numbers = [c for c in cells[1:] if re.match(r"^[\d,.]+", c)]
            assert len(numbers) == 5, f"a figure is missing: {cells}"
    assert "own CPU on top of the ORM work" in out
