"""Time limits: past `time_limit` the attempt fails and `ctx.cancelled` is set; a thread
that ignores it is given up on after the grace period, replaced, and its result ignored."""

from __future__ import annotations

import threading

import pytest

from django_taskrunner import Task, dispatch, register_task
from django_taskrunner.models import FailedTask
from django_taskrunner.store import get_store
from django_taskrunner.worker.executor import Executor
from django_taskrunner.worker.fetcher import Delivery
from django_taskrunner.worker.pool import Pool
from django_taskrunner.worker.running import RunningSet
from tests.internals import unregister_task
from tests.testapp.tasks import blocks_in_c, noop, runs_key, spins_in_python, stops_when_cancelled
from tests.worker_helpers import wait_for, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)


def count(r, field: str) -> int:
    return int(r.hget(runs_key(), field) or 0)


def test_a_task_that_honours_cancelled_fails_its_attempts_and_is_retried(r, run_burst):
    # Given a task with time_limit=0.3 and max_retry=1 that loops until ctx.cancelled
    message = stops_when_cancelled.dispatch({"n": 1})

    # When the worker runs it
    run_burst()

    # Then each attempt was cancelled at its limit, counted as failed, and retried once
    assert count(r, "stops_when_cancelled:1") == 2
    assert count(r, "cancelled:1") == 2  # the attempt number that saw ctx.cancelled
    row = FailedTask.objects.get(message_id=message.id)
    assert row.error_class == "django_taskrunner.exceptions.TimeLimitExceeded"
    assert "past its time limit of 0.3s" in row.error
    assert row.attempts == 2


def test_a_thread_stuck_in_c_is_replaced_and_ends_when_the_call_returns(r, taskrunner_settings):
    # Given one worker thread, a task that sleeps 2 s past a 0.2 s limit, and one behind it
    taskrunner_settings(TIME_LIMIT_GRACE=0.2)
    stuck = blocks_in_c.dispatch({"n": 1, "seconds": 2})
    noop.dispatch({"n": 1})

    with worker_thread(concurrency=1) as worker:
        # When the grace period passes, the attempt is failed for good (max_retry=0)...
        row = wait_for(lambda: FailedTask.objects.filter(message_id=stuck.id).first())
        # ...and the task behind it runs on a replacement thread while the first still sleeps
        wait_for(lambda: count(r, "noop:1") == 1)
        assert count(r, "blocks_in_c:end:1") == 0
        assert worker.pool.abandoned == 1
        # When the sleep returns, the thread sees TaskInterrupted and ends; nothing else
        # happens to the message
        # (the pool stops counting the thread only once its task call has returned, so
        # an end the task recorded would be there by now)
        wait_for(lambda: worker.pool.abandoned == 0, timeout=10)
        assert count(r, "blocks_in_c:end:1") == 0

    assert row.error_class == "django_taskrunner.exceptions.TimeLimitExceeded"
    assert FailedTask.objects.count() == 1
    broker = get_store().streams
    assert broker.pending("default") == 0
    assert broker.length("default") == 0


def test_a_pure_python_loop_that_ignores_cancelled_is_interrupted(r, taskrunner_settings):
    taskrunner_settings(TIME_LIMIT_GRACE=0.2)
    message = spins_in_python.dispatch({"n": 1})

    with worker_thread(concurrency=1) as worker:
        wait_for(lambda: count(r, "spins_in_python:interrupted:1") == 1)
        wait_for(lambda: worker.pool.abandoned == 0)

    row = FailedTask.objects.get(message_id=message.id)
    assert row.error_class == "django_taskrunner.exceptions.TimeLimitExceeded"
    assert count(r, "spins_in_python:start:1") == 1


def test_a_result_that_arrives_after_the_watchdog_gave_up_is_ignored(r):
    # Given a task whose attempt the watchdog settles while it runs
    running = RunningSet()
    acked: list[str] = []

    def late(payload: object) -> None:
        [attempt] = running.snapshot()
        assert running.settle(attempt)  # what the watchdog does when it gives up

    register_task(Task(fn=late, name="tests.late"))
    try:
        message = dispatch("tests.late", None)
        executor = Executor(get_store().streams, "me", lambda queue, sid: acked.append(sid),
                            running)
        get_store().streams.ensure_group("default")
        ((_sid, body),) = get_store().streams.read("default", "me", 1, None)

        # When the task then returns successfully
        executor.handle(Delivery("default", message.stream_id, body))
    finally:
        unregister_task("tests.late")

    # Then its worker thread does nothing more with the message: no ack, no retry
    assert acked == []
    assert get_store().streams.length("default") == 1


def test_an_abandoned_pool_thread_is_replaced_so_capacity_is_kept():
    release = threading.Event()
    done: list[str] = []
    stuck: list[threading.Thread] = []

    def run(item: str) -> None:
        if item == "stuck":
            stuck.append(threading.current_thread())
            release.wait(10)
        done.append(item)

    pool = Pool(1, run)
    pool.submit("stuck")
    wait_for(lambda: stuck)

    pool.abandon(stuck[0])
    pool.submit("next")

    wait_for(lambda: done == ["next"])
    assert pool.size == 1 and pool.abandoned == 1
    release.set()
    wait_for(lambda: pool.abandoned == 0)
    assert done == ["next", "stuck"]
    assert pool.join(5)
