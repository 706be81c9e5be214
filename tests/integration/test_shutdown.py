"""SIGTERM lets running tasks finish, exits 0, and loses nothing."""

from __future__ import annotations

import logging
import signal
import time

import pytest

from django_taskrunner.store import get_store
from django_taskrunner.store.connection import server_clients
from tests.testapp.tasks import marked_sleeper, noop, runs_key, sleeper
from tests.worker_helpers import wait_for, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)


def test_sigterm_during_a_two_second_task_lets_it_finish_and_exits_0(r, spawn_worker, run_burst):
    # Given a worker running a 2-second task, with more tasks queued behind it
    marked_sleeper.dispatch({"n": "long", "seconds": 2})
    for n in range(5):
        noop.dispatch({"n": n})
    worker = spawn_worker("--queue", "default", "--concurrency", "1", "--batch-size", "3")
    wait_until_started(worker)
    broker = get_store().streams
    wait_for(lambda: r.hget(runs_key(), "marked_sleeper:start:long"))  # it is running

    # When it gets SIGTERM mid-task
    worker.send_signal(signal.SIGTERM)
    output = worker.communicate(timeout=20)[0].decode()

    # Then it finished the running task and exited 0
    assert worker.returncode == 0, output
    assert r.hget(runs_key(), "marked_sleeper:long") == b"1"
    # and nothing is lost: what it had not run is back on the stream, not stuck pending
    assert broker.pending("default") == 0
    run_burst("--queue", "default")
    counts = {k.decode(): int(v) for k, v in r.hgetall(runs_key()).items()}
    assert counts == {"marked_sleeper:start:long": 1, "marked_sleeper:long": 1,
                      **{f"noop:{n}": 1 for n in range(5)}}


def wait_until_started(worker) -> None:
    """Read the worker's output until it says it started (its signal handlers are set)."""
    for line in iter(worker.stdout.readline, b""):
        if b"started" in line:
            return
    raise AssertionError("the worker ended before it started")


def test_an_idle_worker_stops_promptly_on_sigint(spawn_worker):
    worker = spawn_worker("--queue", "default",
                          TASKRUNNER_TEST_SETTINGS='{"SHUTDOWN_TIMEOUT": 120}')
    wait_until_started(worker)
    started = time.monotonic()
    worker.send_signal(signal.SIGINT)
    worker.communicate(timeout=180)
    assert worker.returncode == 0
    # It does not wait out SHUTDOWN_TIMEOUT (120 s here, far past any slow machine's
    # start-up and exit): only its current 200 ms read.
    assert time.monotonic() - started < 60


def test_sigterm_logs_what_the_shutdown_waits_for(spawn_worker):
    # Given a worker running a 2-second task, with one more fetched and not started
    sleeper.dispatch({"n": "long", "seconds": 2})
    noop.dispatch({"n": 1})
    worker = spawn_worker("--queue", "default", "--concurrency", "1", "--batch-size", "3")
    wait_until_started(worker)
    wait_for(lambda: get_store().streams.pending("default") == 2)
    time.sleep(0.3)

    # When it gets SIGTERM
    worker.send_signal(signal.SIGTERM)
    output = worker.communicate(timeout=20)[0].decode()

    # Then it says how long it waits, for which task, and what goes back to the queue
    assert worker.returncode == 0, output
    assert "stopping: waiting up to 10s for 1 running task(s) (tests.testapp.tasks.sleeper " \
           "id=" in output, output
    assert "1 fetched and not started go back to their queue" in output, output
    assert "put 1 message(s) this worker held but did not finish back on their queue" \
        in output, output
    assert "gave up" not in output


def test_a_shutdown_that_times_out_warns_what_it_leaves(caplog, r):
    # Given an in-process worker running a task longer than its shutdown timeout
    sleeper.dispatch({"n": "slow", "seconds": 3})
    with caplog.at_level(logging.INFO, logger="django_taskrunner.worker.worker"):
        with worker_thread(concurrency=1, shutdown_timeout=0.5) as worker:
            wait_for(lambda: worker.running.snapshot())
        # When the worker is stopped (the block's end) and the timeout passes

    # Then it said what it waited for, then that it gave up and on what
    messages = [(record.levelname, record.getMessage()) for record in caplog.records]
    waiting = [m for level, m in messages if level == "INFO" and "waiting up to 0.5s for 1" in m]
    assert waiting, messages
    [gave_up] = [m for level, m in messages if level == "WARNING" and "gave up" in m]
    assert "the shutdown timeout (0.5s)" in gave_up
    assert "1 task(s) still running (tests.testapp.tasks.sleeper id=" in gave_up
    assert "put back on their queue" in gave_up
    # The abandoned task's thread ends inside this test: later it would write into the
    # keys of whatever test runs then (its record() reads the prefix when it runs).
    wait_for(lambda: r.hget(runs_key(), "sleeper:slow") is not None, timeout=15)


def test_a_burst_worker_says_it_stops_with_nothing_running(run_burst, caplog):
    noop.dispatch({"n": 1})
    with caplog.at_level(logging.INFO, logger="django_taskrunner.worker.worker"):
        run_burst()
    messages = [record.getMessage() for record in caplog.records]
    assert "burst: every queue is empty, stopping" in messages
    assert any(m.startswith("stopping: no task running") for m in messages), messages


def test_a_second_signal_ends_the_wait_and_says_so(caplog, r):
    sleeper.dispatch({"n": "slow", "seconds": 3})
    with caplog.at_level(logging.INFO, logger="django_taskrunner.worker.worker"):
        with worker_thread(concurrency=1, shutdown_timeout=30) as worker:
            wait_for(lambda: worker.running.snapshot())
            worker.request_stop()
            wait_for(lambda: any("waiting up to 30s" in rec.getMessage()
                                 for rec in caplog.records))
            worker.force_stop()
    [gave_up] = [rec.getMessage() for rec in caplog.records if "gave up" in rec.getMessage()]
    assert gave_up.startswith("stopping: gave up waiting at a second signal; 1 task(s)")
    # The abandoned task's thread ends inside this test: later it would write into the
    # keys of whatever test runs then (its record() reads the prefix when it runs).
    wait_for(lambda: r.hget(runs_key(), "sleeper:slow") is not None, timeout=15)


def test_a_stop_wakes_the_blocked_reads_instead_of_waiting_out_block_ms(r, spawn_worker):
    # Given an idle worker whose fetcher has just begun a 9-second blocking read
    worker = spawn_worker("--queue", "default", TASKRUNNER_TEST_SETTINGS=(
        '{"BLOCK_MS": 9000, "SOCKET_TIMEOUT": 30}'))
    wait_until_started(worker)
    wait_for(lambda: blocked_reads(r))

    # When it gets SIGTERM
    started = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    output = worker.communicate(timeout=60)[0].decode()

    # Then it exits at once: its read is woken (CLIENT UNBLOCK), not waited out (about
    # 9 s from here, before the stop woke it; an idle stop takes well under a second)
    assert worker.returncode == 0, output
    assert time.monotonic() - started < 6, output


def blocked_reads(r) -> list[dict]:
    """The named connections of workers blocked in XREADGROUP, on every server (each
    node of a cluster)."""
    return [entry for server in server_clients(r) for entry in server.client_list(_type="normal")
            if entry.get("name", "").startswith("taskrunner:")
            and "b" in entry.get("flags", "") and entry.get("cmd") == "xreadgroup"]
