"""bench/growth.py in smoke mode: each subcommand runs and prints every figure.

Small sizes only; the figures are printed, never compared. `failed` needs PostgreSQL
(TASKRUNNER_TEST_DATABASE_URL's server, default 127.0.0.1:5432, user postgres) and makes
a database of its own, dropped at the end.
"""

from __future__ import annotations

import importlib.util
import os
from urllib.parse import urlparse

import pytest

from tests.bench.bench_run import run_bench

URL = urlparse(os.environ.get("TASKRUNNER_TEST_DATABASE_URL")
               or "postgres://postgres@127.0.0.1:5432/tr_bench")
HOST, PORT, USER = URL.hostname or "127.0.0.1", str(URL.port or 5432), URL.username or "postgres"
NAME = f"{(URL.path.strip('/') or 'tr_bench')}_growth_smoke"


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


def run(*args: str) -> str:
    code, out, _ = run_bench("growth.py", *args, "--smoke")
    assert code == 0, out
    return out


def table_rows(out: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in out.splitlines()
            if line.startswith("| ") and not line.startswith("|---")][1:]


@pytest.mark.skipif(importlib.util.find_spec("psutil") is None, reason="psutil not installed")
def test_failed_rows_every_page_is_timed() -> None:
    down = postgres_down()
    if down:
        pytest.skip(down)
    out = run("failed", "--pg-host", HOST, "--pg-port", PORT, "--pg-user", USER,
              "--pg-name", NAME)
    rows = table_rows(out)
    assert {row[0] for row in rows} == {"200", "2,000"}, out
    assert len(rows) == 2 * 7, out
    for row in rows:
        assert row[3].replace(",", "").isdigit() and row[4].replace(",", "").isdigit(), row


@pytest.mark.skipif(importlib.util.find_spec("psutil") is None, reason="psutil not installed")
@pytest.mark.parametrize("what, sizes", [("queues", {"1", "3"}), ("workers", {"1", "2"})])
def test_idle_costs_are_measured(what, sizes) -> None:
    rows = table_rows(run(what))
    assert {row[0] for row in rows} == sizes
    for row in rows:
        assert all(cell.rstrip("%").replace(",", "").replace(".", "").isdigit()
                   for cell in row[1:]), row
