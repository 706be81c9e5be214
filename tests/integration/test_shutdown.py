"""SIGTERM lets running tasks finish, exits 0, and loses nothing."""

from __future__ import annotations

import signal
import time

import pytest

from django_taskrunner.broker import get_broker
from tests.testapp.tasks import marked_sleeper, noop, runs_key
from tests.worker_helpers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_sigterm_during_a_two_second_task_lets_it_finish_and_exits_0(r, spawn_worker, run_burst):
    # Given a worker running a 2-second task, with more tasks queued behind it
    marked_sleeper.dispatch({"n": "long", "seconds": 2})
    for n in range(5):
        noop.dispatch({"n": n})
    worker = spawn_worker("--queue", "default", "--concurrency", "1", "--batch-size", "3")
    wait_until_started(worker)
    broker = get_broker()
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
