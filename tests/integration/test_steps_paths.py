"""Every way a task id runs again finds its kept steps: a reclaim after its worker died,
a put-back by a stopping worker. A chain member's steps are its own; eager mode keeps
them in process only; an async step refuses bad input as a sync one does."""

from __future__ import annotations

import json

import pytest

from django_taskrunner import chain, lookup, lookup_workflow
from django_taskrunner.store import get_store, keys
from django_taskrunner.worker.steps import put_back
from tests.testapp.step_tasks import chain_step, log_key, three_steps
from tests.worker_helpers import age_pending, wait_for, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)


def log(r) -> list[str]:
    return [item.decode() for item in r.lrange(log_key(), 0, -1)]


def held_by_a_dead_worker(r) -> tuple[str, bytes]:
    """The queue's one entry, delivered to a worker that then died: (stream id, body)."""
    broker = get_store().streams
    broker.ensure_group("default")
    ((stream_id, body),) = broker.read("default", "dead-worker", 1, None)
    assert body is not None
    return stream_id, body


def kept_by_the_dead_run(r, task_id: str, n: int) -> None:
    """Step "a" of `task_id`, as the run that died kept it."""
    get_store().steps.keep(
        task_id, "a", json.dumps({"result": f"a-of-{n}", "at": 1.0}), ttl_seconds=600)


def test_a_reclaimed_run_returns_the_steps_its_dead_run_kept(r, taskrunner_settings):
    # Given a task whose worker died after keeping its first step
    taskrunner_settings(RESERVATION_TIMEOUT=30)
    message = three_steps.dispatch({"n": 20})
    held_by_a_dead_worker(r)
    kept_by_the_dead_run(r, message.id, 20)
    broker = get_store().streams
    assert age_pending(r, broker.stream("default"), broker.group, 31, "dead-worker")

    # When a live worker reclaims and runs it
    with worker_thread():
        wait_for(lambda: lookup(message.id).status == "succeeded", timeout=30)

    # Then the kept step did not run again, the others ran once
    assert [e for e in log(r) if ":key:" not in e] == ["20:b", "20:c"]
    assert lookup(message.id).result == ["a-of-20", "b-of-20", "c-of-20"]


def test_a_run_put_back_by_a_stopping_worker_returns_its_kept_steps(r, run_burst):
    # Given a first attempt that kept a step and was put back on its stream while it ran
    message = three_steps.dispatch({"n": 21})
    stream_id, body = held_by_a_dead_worker(r)
    kept_by_the_dead_run(r, message.id, 21)
    assert get_store().streams.requeue("default", "dead-worker", stream_id, put_back(body, None))

    # When a worker runs it (still attempt 1, a new entry delivered for the first time)
    run_burst()

    # Then it read the kept step instead of running it again
    assert [e for e in log(r) if ":key:" not in e] == ["21:b", "21:c"]
    assert lookup(message.id).attempt == 1


def test_each_chain_member_has_its_own_steps_and_parent_result(r):
    # Given a chain whose members each run a step of the same name, the second member
    # failing once after it
    handle = chain(chain_step.s({"n": "x", "add": 1}),
                   chain_step.s({"n": "y", "add": 10, "fail": True})).dispatch()

    # When it runs to the end
    with worker_thread():
        wait_for(lambda: (rec := lookup_workflow(handle.id)) is not None and rec.finished,
                 timeout=30)

    # Then each member ran its own step once (the retry kept y's), with its parent's result
    assert log(r) == ["x:same", "x:parent:None", "y:same", "y:parent:1", "y:parent:1"]
    first, second = (lookup(task_id) for task_id in handle.task_ids)
    assert first.steps["same"]["result"] == "same-of-x"
    assert second.steps["same"]["result"] == "same-of-y"
    assert second.result == 11 and second.attempt == 2


def test_eager_steps_write_nothing_to_redis(r, taskrunner_settings):
    taskrunner_settings(EAGER=True)
    message = three_steps.dispatch({"n": 22, "fail": True})
    assert [e for e in log(r) if ":key:" not in e] == ["22:a", "22:b", "22:c"]
    assert not r.exists(keys.steps_key(get_store().prefix, message.id))


@pytest.mark.parametrize("kind, error", [("value", "InvalidTaskPayload"),
                                         ("twice", "DuplicateStep")])
def test_an_async_step_refuses_bad_input_as_a_sync_one_does(r, run_burst, kind, error):
    from django_taskrunner.models import FailedTask
    from tests.testapp.step_tasks import async_bad_step

    message = async_bad_step.dispatch({"kind": kind})
    run_burst()
    row = FailedTask.objects.get(message_id=message.id)
    assert error in row.error and "step 's'" in row.error
    if kind == "value":  # nothing kept
        assert not r.exists(keys.steps_key(get_store().prefix, message.id))
