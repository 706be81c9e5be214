"""A corrupt key met while settling (a workflow's bodies, its stage count, a key of the
wrong type, a task record of the wrong type) affects only the task that uses it: the
acker goes on, every other task of the batch runs once and ends final, nothing stays
pending. And an internal thread of the worker that dies takes the worker down, with a
non-zero exit code, instead of leaving a worker that runs tasks it cannot ack."""

from __future__ import annotations

import pytest

from django_taskrunner import chain, lookup, lookup_workflow
from django_taskrunner.conf import get_settings
from django_taskrunner.models import FailedTask
from django_taskrunner.store import get_store, keys
from tests.testapp import tasks
from tests.testapp.workflow_tasks import wf_member
from tests.worker_helpers import exit_code_of, new_worker, wait_for, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)

PLAIN = 50


def _corrupt(r, prefix: str, workflow_id: str, how: str) -> None:
    """Spoil the workflow's keys the way `how` says (by hand, as a bad release might)."""
    if how == "bodies":  # the second step's body entry without its '<shard>|<delay>|'
        r.lset(keys.workflow_bodies_key(prefix, workflow_id), 1, "no bars here")
    elif how == "stage-count":
        r.hset(keys.workflow_key(prefix, workflow_id), "n:0", "many")
    elif how == "wrong-type":  # the done set is a string
        r.set(keys.workflow_done_key(prefix, workflow_id), "oops")


def _plain_tasks() -> list[str]:
    return [tasks.count_by_id.dispatch({"n": n}).id for n in range(PLAIN)]


def _assert_plain_tasks_settled(r, ids: list[str], skip: str | None = None) -> None:
    """Each plain task ran once, its record is final (but `skip`'s), nothing is pending,
    and no failed row was written (a false `WorkerLost` would be one)."""
    wait_for(lambda: all(lookup(task_id).status == "succeeded"
                         for task_id in ids if task_id != skip), timeout=30)
    runs = r.hgetall(tasks.runs_key())
    counts = [int(runs.get(f"count_by_id:{task_id}".encode(), 0)) for task_id in ids]
    stream = keys.stream_key(get_store().prefix, "default")
    group = get_settings().CONSUMER_GROUP
    wait_for(lambda: r.xpending(stream, group)["pending"] == 0, timeout=30)
    statuses = [lookup(task_id).status for task_id in ids if task_id != skip]
    rows = list(FailedTask.objects.values_list("task_name", flat=True))
    print(f"plain={len(ids)} ran_once={counts.count(1)} ran_twice_or_more="
          f"{sum(1 for c in counts if c > 1)} succeeded={statuses.count('succeeded')} "
          f"pending_after={r.xpending(stream, group)['pending']} failed_rows={rows}")
    assert counts == [1] * len(ids)
    assert rows == []


@pytest.mark.parametrize("how", ["bodies", "stage-count", "wrong-type"])
def test_a_corrupt_workflow_fails_alone_and_the_batch_goes_through(r, how, caplog):
    prefix = get_store().prefix
    handle = chain(wf_member.s({"n": 1}), wf_member.s({"n": 2})).dispatch()
    _corrupt(r, prefix, handle.id, how)
    ids = _plain_tasks()
    with worker_thread(concurrency=4) as worker:
        _assert_plain_tasks_settled(r, ids)
        wait_for(lambda: lookup(handle.task_ids[0]).status == "succeeded")
        assert worker.acker.is_alive()
    workflow = lookup_workflow(handle.id)
    assert workflow is not None and workflow.status == "failed"
    assert lookup(handle.task_ids[1]).status == "delayed"  # never sent
    assert keys.workflow_key(prefix, handle.id) in caplog.text


def test_a_task_record_of_the_wrong_type_spoils_only_its_own_record(r, caplog):
    ids = _plain_tasks()
    spoiled = ids[PLAIN // 2]
    record_key = keys.record_key(get_store().prefix, spoiled)
    r.delete(record_key)
    r.rpush(record_key, "not a hash")
    with worker_thread(concurrency=4) as worker:
        _assert_plain_tasks_settled(r, ids, skip=spoiled)
        assert worker.acker.is_alive()
    assert r.type(record_key) == b"list"
    assert record_key in caplog.text


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_an_internal_thread_that_dies_takes_the_worker_down_non_zero(r, caplog):
    worker = new_worker(
        ("default",), concurrency=2, block_ms=100, shutdown_timeout=5)

    def broken(*_args, **_kwargs):
        raise RuntimeError("a bug in the fetcher")

    worker.fetchers[0]._read_stream = broken  # a bug: the fetcher thread dies on its read
    code = exit_code_of(worker)
    assert code is not None, "the worker went on without its fetcher"
    assert code != 0
    assert "internal thread taskrunner-fetch-default died unexpectedly" in caplog.text
