"""A task that fails for good while the database is down (its FailedTask row cannot be
written) is not left pending nor run again: its record says "failed", its entry is
acked, the row waits in Redis, and the leader writes it once the database answers. The
same through Django's Tasks backend: the result ends FAILED, not READY.

On a private PostgreSQL cluster, stopped during the failures (never the shared one);
skipped, with the reason, where the server binaries are missing."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from django_taskrunner import lookup
from django_taskrunner.compat import TaskResultStatus
from django_taskrunner.store import get_store
from tests import private_postgres
from tests.conftest import ROOT, worker_env
from tests.testapp import framework_tasks
from tests.testapp.tasks import always_fails, fails_with_nul, noop, runs_key
from tests.worker_helpers import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def postgres() -> Iterator[private_postgres.PrivatePostgres]:
    why = private_postgres.available()
    if why is not None:
        pytest.skip(f"private PostgreSQL: {why}")
    workdir = Path(tempfile.mkdtemp(prefix="taskrunner-pg-"))
    server = private_postgres.PrivatePostgres(workdir)
    server.start()
    try:
        server.create_database()
        yield server
    finally:
        if server.running():
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def site_env(prefix, redis_target, server) -> dict[str, str]:
    env = worker_env(prefix, redis_target)
    env["TASKRUNNER_TEST_DATABASE_URL"] = server.url
    env["TASKRUNNER_TEST_DB_NAME"] = server.database
    return env


def rows_written(server, ids: list[str]) -> int:
    import psycopg

    with psycopg.connect(server.admin_dsn()) as conn:
        (count,) = conn.execute(
            "SELECT count(*) FROM django_taskrunner_failedtask WHERE message_id = ANY(%s)",
            [ids]).fetchone()
    return int(count)


def pending(r) -> int:
    broker = get_store().streams
    return sum(r.xpending(broker.stream(queue), broker.group)["pending"]
               for queue in ("default", "framework"))


@contextmanager
def site_worker(env: dict[str, str]) -> Iterator[list[str]]:
    """Migrate the private database, then run `runtasks` on it (the leader); yields a
    list that holds its output once it stopped."""
    subprocess.run([sys.executable, "-m", "django", "migrate", "--noinput", "-v", "0"],
                   cwd=ROOT, env=env, check=True, timeout=300)
    worker = subprocess.Popen(  # noqa: S603 - our own arguments
        [sys.executable, "-m", "django", "runtasks", "-Q", "default", "-Q", "framework",
         "-c", "2"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output: list[str] = []
    try:
        ready = noop.dispatch({"n": "ready"})
        wait_for(lambda: lookup(ready.id).status == "succeeded", 60)
        yield output
    finally:
        worker.terminate()
        output.append(worker.communicate(timeout=30)[0].decode(errors="replace"))


def test_a_failure_while_the_database_is_down_is_finished_and_written_later(
        r, prefix, redis_target, postgres):
    # Given a worker (the leader) on a database that answers
    with site_worker(site_env(prefix, redis_target, postgres)) as output:
        # When the database stops, and a task and a framework task fail for good
        postgres.stop()
        failed = always_fails.dispatch({"n": "down"})
        result = framework_tasks.fails.enqueue("while down")

        # Then both finish: record "failed", result FAILED, nothing pending, run once
        wait_for(lambda: lookup(failed.id).status == "failed", 60)
        wait_for(lambda: (result.refresh(), result.status)[1] == TaskResultStatus.FAILED, 60)
        wait_for(lambda: pending(r) == 0, 30)
        assert r.hget(runs_key(), "always_fails:down") == b"3"  # its 3 attempts, no more
        # and their rows wait in Redis
        kept = get_store().failed_rows
        assert kept.count() == 2

        # When the database answers again, the leader writes each row once
        postgres.start()
        restarted = time.monotonic()
        wait_for(lambda: kept.count() == 0, 120)
        written = rows_written(postgres, [failed.id, result.id])
        print(f"database stopped: record {lookup(failed.id).status}, result {result.status}, "
              f"pending 0, runs {int(r.hget(runs_key(), 'always_fails:down'))} (3 attempts), "
              f"kept in Redis 2; restarted: {written} rows written within "
              f"{time.monotonic() - restarted:.1f}s, 0 kept")
        assert written == 2
        assert r.hget(runs_key(), "always_fails:down") == b"3"
        assert lookup(failed.id).status == "failed"
    assert "kept in Redis" in output[0], output[0][-3000:]


def test_an_error_postgresql_text_cannot_hold_is_written_escaped(
        r, prefix, redis_target, postgres):
    with site_worker(site_env(prefix, redis_target, postgres)):
        # When a task fails with a NUL byte in its error (PostgreSQL refuses the row)
        failed = fails_with_nul.dispatch({"n": 1})
        # Then it finishes, and its row is written with the byte shown escaped
        wait_for(lambda: lookup(failed.id).status == "failed", 60)
        wait_for(lambda: pending(r) == 0, 30)
        wait_for(lambda: rows_written(postgres, [failed.id]) == 1, 120)
    assert r.hget(runs_key(), "fails_with_nul:1") == b"1"
    import psycopg

    with psycopg.connect(postgres.admin_dsn()) as conn:
        (error,) = conn.execute("SELECT error FROM django_taskrunner_failedtask "
                                "WHERE message_id = %s", [failed.id]).fetchone()
    assert error == "ValueError: before\\x00after"
