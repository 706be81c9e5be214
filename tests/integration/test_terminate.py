"""`cancel(id, terminate=True)`: a running task that ignores `ctx.cancelled` is stopped
(TaskInterrupted in its thread), recorded cancelled, not retried, its lock freed; the
worker's thread goes on to run the next task."""

from __future__ import annotations

import pytest

from django_taskrunner import cancel, dispatch, lookup
from tests.testapp.async_tasks import async_sleeper
from tests.testapp.tasks import ignores_cancel, noop, runs_key
from tests.worker_helpers import wait_for, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)


def runs(r, name: str) -> int:
    return int(r.hget(runs_key(), name) or 0)


def test_a_terminated_thread_task_stops_is_cancelled_and_not_retried(r):
    with worker_thread(("default",), concurrency=1) as worker:
        task = dispatch(ignores_cancel, {"n": 1})
        wait_for(lambda: lookup(task.id).status == "running")  # its start write landed
        assert cancel(task.id, terminate=True) is True
        wait_for(lambda: runs(r, "ignores_cancel:stopped:1"))
        wait_for(lambda: lookup(task.id).status == "cancelled")
        assert runs(r, "ignores_cancel:finished:1") == 0
        again = dispatch(ignores_cancel, {"n": 1})  # the unique lock was freed
        # Once it runs: cancelled while still queued, it would rightly never start.
        wait_for(lambda: lookup(again.id).status == "running")
        cancel(again.id, terminate=True)
        dispatch(noop, {"n": 2})  # the pool's one thread goes on
        wait_for(lambda: runs(r, "noop:2") == 1)
        assert worker.pool.size == 1
    assert runs(r, "ignores_cancel:start:1") == 2  # each dispatch ran once: no retry
    assert lookup(task.id).attempt == 1


def test_a_plain_cancel_leaves_the_thread_running_to_its_end_of_choice(r):
    with worker_thread(("default",), concurrency=1):
        task = dispatch(ignores_cancel, {"n": 3})
        # Its record says running (the start write lands a few ms after the start; a
        # cancel before it finds the task not started and ends its record at once).
        wait_for(lambda: lookup(task.id).status == "running")
        assert cancel(task.id) is True
        assert lookup(task.id).status == "running"  # it ignores ctx.cancelled
        cancel(task.id, terminate=True)  # a second cancel, terminating, still stops it
        wait_for(lambda: lookup(task.id).status == "cancelled")
    assert runs(r, "ignores_cancel:finished:3") == 0


def test_a_terminated_async_task_is_cancelled(r):
    with worker_thread(("default",)):
        task = dispatch(async_sleeper, {"n": 4, "seconds": 30})
        wait_for(lambda: runs(r, "async_sleeper:start:4"))
        cancel(task.id, terminate=True)
        wait_for(lambda: lookup(task.id).status == "cancelled")
    assert runs(r, "async_sleeper:4") == 0
