"""`pause_queue` / `resume_queue` with a real worker: nothing new of a paused queue starts,
what was fetched goes back unharmed, running tasks and other queues go on, and the pause
outlives a worker's restart."""

from __future__ import annotations

import pytest

from django_taskrunner import (
    InvalidTaskOptions,
    dispatch,
    lookup,
    pause_queue,
    paused_queues,
    resume_queue,
)
from django_taskrunner.store import get_store
from tests.testapp.tasks import marked_sleeper, noop, on_other_queue, runs_key
from tests.worker_helpers import wait_for, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)


def runs(r, name: str, n: int) -> int:
    return int(r.hget(runs_key(), f"{name}:{n}") or 0)


def pending(r) -> int:
    broker = get_store().streams
    return r.xpending(broker.stream("default"), broker.group)["pending"]


def test_pause_and_resume_say_whether_they_changed_anything():
    assert pause_queue("default") is True
    assert pause_queue("default") is False
    assert set(paused_queues()) == {"default"}
    assert resume_queue("default") is True
    assert resume_queue("default") is False
    assert paused_queues() == {}


def test_a_bad_queue_name_is_refused():
    with pytest.raises(InvalidTaskOptions):
        pause_queue("no spaces here")


def test_a_paused_queue_starts_nothing_while_other_queues_run_and_survives_a_restart(r):
    pause_queue("default")
    waiting = dispatch(noop, {"n": 1})
    with worker_thread(("default", "other")) as worker:  # started after the pause
        wait_for(lambda: "default" in worker.pauses.paused)
        dispatch(on_other_queue, {"n": 2})
        wait_for(lambda: runs(r, "on_other_queue", 2))
        assert runs(r, "noop", 1) == 0
        assert lookup(waiting.id).status == "queued"
    with worker_thread(("default",)) as worker:  # a restart: still paused
        wait_for(lambda: "default" in worker.pauses.paused)
        assert runs(r, "noop", 1) == 0
        resume_queue("default")
        wait_for(lambda: runs(r, "noop", 1) == 1)
    assert lookup(waiting.id).status == "succeeded"
    assert lookup(waiting.id).attempt == 1


def test_fetched_tasks_go_back_unstarted_and_the_running_one_finishes(r):
    with worker_thread(("default",), concurrency=1, batch_size=10) as worker:
        running = dispatch(marked_sleeper, {"n": 0, "seconds": 3})
        wait_for(lambda: r.hget(runs_key(), "marked_sleeper:start:0"))
        fetched = [dispatch(noop, {"n": n}) for n in range(1, 4)]
        wait_for(lambda: pending(r) >= 2)  # one or more read into its buffer behind the sleeper
        pause_queue("default")
        wait_for(lambda: "default" in worker.pauses.paused)
        wait_for(lambda: runs(r, "marked_sleeper", 0) == 1)  # the running one went on
        wait_for(lambda: pending(r) == 0)  # the buffered ones went back on the stream
        assert [runs(r, "noop", n) for n in range(1, 4)] == [0, 0, 0]
        assert {lookup(task.id).status for task in fetched} == {"queued"}
        resume_queue("default")
        wait_for(lambda: [runs(r, "noop", n) for n in range(1, 4)] == [1, 1, 1])
    assert lookup(running.id).status == "succeeded"
    assert {lookup(task.id).attempt for task in fetched} == {1}


def test_a_stray_key_under_the_paused_name_stops_no_worker(r, prefix):
    from django_taskrunner.store import keys

    r.rpush(keys.paused_queues_key(prefix), "garbage")
    dispatch(noop, {"n": 1})
    with worker_thread(("default",)):
        wait_for(lambda: runs(r, "noop", 1) == 1)
