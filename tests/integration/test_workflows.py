"""Workflows through the public names: chain, group (with `then`), Task.s, ctx.parent_result,
lookup_workflow and cancel_workflow, run by a real worker on a real Redis."""

from __future__ import annotations

import json

import pytest

from django_taskrunner import (
    InvalidTaskOptions,
    InvalidTaskPayload,
    Task,
    TaskNotFound,
    cancel_workflow,
    chain,
    group,
    lookup,
    lookup_workflow,
)
from django_taskrunner.core.workflows import Signature, from_dict
from django_taskrunner.models import FailedTask
from django_taskrunner.store import get_store, keys
from tests.testapp import tasks
from tests.testapp.workflow_tasks import (
    noted,
    wf_add,
    wf_blocked,
    wf_collect,
    wf_fail,
    wf_failing_callback,
    wf_flaky,
    wf_key,
    wf_member,
)
from tests.worker_helpers import wait_for, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)


def finished(workflow_id: str):
    record = lookup_workflow(workflow_id)
    return record if record is not None and record.finished else None


def test_a_chain_runs_in_order_and_passes_each_result_on(r):
    handle = chain(wf_add.s({"name": "a", "add": 1}), wf_add.s({"name": "b", "add": 10}),
                   wf_add.s({"name": "c", "add": 100})).dispatch()
    assert lookup(handle.task_ids[0]).status == "queued"
    assert lookup(handle.task_ids[1]).status == "delayed"
    with worker_thread():
        record = wait_for(lambda: finished(handle.id))
    assert noted("order") == [["a", None], ["b", 1], ["c", 11]]
    assert record.status == "succeeded"
    assert (record.total, record.succeeded, record.failed, record.pending, record.running) == (
        3, 3, 0, 0, 0)
    assert lookup(handle.task_ids[-1]).result == 111
    assert record.task_ids == handle.task_ids
    # kept RESULT_TTL (a day) once finished, like a task record
    assert 0 < r.ttl(keys.workflow_key(get_store().prefix, handle.id)) <= 86400


def test_a_failed_step_stops_the_chain_and_says_which(r):
    handle = chain(wf_add.s({"name": "a", "add": 1}), wf_fail.s({}),
                   wf_blocked.s({})).dispatch()
    with worker_thread():
        record = wait_for(lambda: finished(handle.id))
        assert record.status == "failed"
        assert record.failed_step == 1
        assert (record.succeeded, record.failed, record.pending) == (1, 1, 1)
    assert noted("order") == [["a", None], ["fail", None]]
    assert lookup(handle.task_ids[2]).status == "delayed"  # never sent
    assert FailedTask.objects.filter(message_id=handle.task_ids[1]).exists()


def test_a_group_callback_sees_every_result_in_order_none_for_failed_ones(r):
    members = [wf_member.s({"n": n}) for n in range(5)] + [wf_fail.s({})]
    handle = group(*members, then=wf_collect.s({})).dispatch()
    with worker_thread(concurrency=4):
        record = wait_for(lambda: finished(handle.id))
    assert json.loads(r.get(wf_key("callback-parent"))) == [0, 1, 2, 3, 4, None]
    assert int(r.get(wf_key("callback-runs"))) == 1
    assert record.status == "finished"  # done, one member failed
    assert (record.total, record.succeeded, record.failed) == (7, 6, 1)
    assert record.callback_id == handle.task_ids[-1]
    assert lookup(record.callback_id).result == "collected"


def test_members_that_fail_and_retry_are_counted_once_at_their_final_outcome(r):
    handle = group(wf_flaky.s({"n": 1, "ok_at": 2}), wf_flaky.s({"n": 2, "ok_at": 0}),
                   then=wf_collect.s({})).dispatch()
    with worker_thread():
        record = wait_for(lambda: finished(handle.id))
    assert {k.decode(): int(v) for k, v in r.hgetall(wf_key("attempts")).items()} == {
        "1": 2, "2": 3}
    assert json.loads(r.get(wf_key("callback-parent"))) == [1, None]
    assert int(r.get(wf_key("callback-runs"))) == 1
    assert (record.succeeded, record.failed) == (2, 1)


def test_a_callback_that_fails_is_retried_then_gets_a_failed_row(r):
    handle = group(wf_member.s({"n": 1}), then=wf_failing_callback.s({})).dispatch()
    with worker_thread():
        record = wait_for(lambda: finished(handle.id))
    assert int(r.get(wf_key("callback-runs"))) == 2  # max_retry=1
    assert record.status == "failed" and record.failed_step == 1
    assert FailedTask.objects.filter(message_id=handle.task_ids[-1]).exists()


def test_a_group_inside_a_chain(r):
    handle = chain(wf_add.s({"name": "first", "add": 1}),
                   group(wf_member.s({"n": 7}), wf_member.s({"n": 8})),
                   wf_collect.s({})).dispatch()
    with worker_thread():
        record = wait_for(lambda: finished(handle.id))
    assert noted("order") == [["first", None]]
    assert json.loads(r.get(wf_key("callback-parent"))) == [7, 8]
    assert record.status == "succeeded"
    assert record.stage_sizes == (1, 2, 1)


def test_a_group_of_a_chain_goes_on_after_failed_members(r):
    handle = chain(group(wf_fail.s({}), wf_member.s({"n": 2})), wf_collect.s({})).dispatch()
    with worker_thread():
        record = wait_for(lambda: finished(handle.id))
    assert json.loads(r.get(wf_key("callback-parent"))) == [None, 2]
    assert record.status == "finished"


def test_cancelling_a_workflow_cancels_its_pending_members_and_sends_no_more(r):
    members = [wf_member.s({"n": n}) for n in range(3)]
    handle = chain(group(*members), wf_blocked.s({})).dispatch()
    assert cancel_workflow(handle.id) is True
    assert cancel_workflow(handle.id) is False  # finished now
    record = lookup_workflow(handle.id)
    assert record.status == "cancelled"
    assert {lookup(task_id).status for task_id in handle.task_ids} == {"cancelled"}
    with worker_thread():
        wait_for(lambda: get_store().streams.length("default") == 0
                 and get_store().streams.pending("default") == 0)
    assert r.hlen(wf_key("member-runs")) == 0
    assert noted("order") == []


def test_unknown_workflows(r):
    assert lookup_workflow("nope") is None
    assert lookup_workflow("../x") is None
    assert cancel_workflow("nope") is False


def test_bad_signatures_fail_before_anything_is_queued(r):
    with pytest.raises(InvalidTaskPayload, match="not JSON-serialisable"):
        wf_member.s({"n": object()})
    with pytest.raises(TaskNotFound):
        Task(fn=lambda payload: None, name="not.registered").s({})
    with pytest.raises(InvalidTaskOptions, match="unknown option"):
        wf_member.s({}, priority_typo=3)
    with pytest.raises(InvalidTaskOptions, match="at least one step"):
        chain()
    with pytest.raises(InvalidTaskOptions, match="at least one member"):
        group(then=wf_collect.s({}))
    with pytest.raises(InvalidTaskOptions, match="first step only"):
        chain(wf_member.s({"n": 1}), tasks.unique_order.s({"order": "x"}, unique_for=5)
              ).dispatch()
    assert get_store().streams.length("default") == 0
    assert r.zcard(keys.workflow_index_key(get_store().prefix)) == 0


def test_signatures_round_trip_through_json(r):
    workflow = chain(wf_add.s({"name": "a", "add": 1}, queue="default", delay=0),
                     group(wf_member.s({"n": 1}), then=wf_collect.s({})))
    data = json.loads(json.dumps(workflow.to_dict()))
    again = from_dict(data)
    assert again.to_dict() == workflow.to_dict()
    assert isinstance(again.steps[0], Signature)


def test_first_stage_options_pass_through(r):
    handle = group(wf_member.s({"n": 1}, queue="other"), wf_member.s({"n": 2}, delay=3600),
                   then=wf_collect.s({})).dispatch()
    assert lookup(handle.task_ids[0]).queue == "other"
    assert lookup(handle.task_ids[1]).status == "delayed"
    assert get_store().streams.length("other") == 1


def test_eager_mode_runs_a_workflow_in_process(settings):
    settings.TASKRUNNER = {**settings.TASKRUNNER, "EAGER": True}
    handle = chain(wf_add.s({"name": "a", "add": 2}),
                   group(wf_member.s({"n": 1}), wf_fail.s({})),
                   wf_collect.s({})).dispatch()
    assert len(handle.task_ids) == 4
    assert json.loads(get_store().client.get(wf_key("callback-parent"))) == [1, None]
    with pytest.raises(ValueError, match="fails for good"):
        chain(wf_fail.s({}), wf_blocked.s({})).dispatch()
    assert ["blocked", None] not in noted("order")


def test_a_member_counted_twice_dispatches_the_next_stage_once(r):
    from django_taskrunner.store.workflows import MemberDone

    handle = group(wf_member.s({"n": 1}), wf_member.s({"n": 2}), then=wf_collect.s({})
                   ).dispatch()
    broker = get_store().streams
    assert broker.length("default") == 2
    workflows = broker.store.workflows
    first = MemberDone(handle.id, 0, 0, "succeeded", ("default",))
    last = MemberDone(handle.id, 1, 0, "failed", ("default",))
    assert workflows.member_done(first) == "counted"
    assert workflows.member_done(first) == "duplicate"  # a second run, a batch sent twice
    assert workflows.member_done(last) == "next"
    assert workflows.member_done(last) == "duplicate"
    assert broker.length("default") == 3  # the callback, once
    record = lookup_workflow(handle.id)
    assert (record.succeeded, record.failed, record.running, record.pending) == (1, 1, 1, 0)


def test_a_later_step_with_a_delay_waits_in_the_delayed_set(r):
    handle = chain(wf_member.s({"n": 1}), wf_collect.s({}, delay=3600)).dispatch()
    with worker_thread():
        wait_for(lambda: lookup(handle.task_ids[0]).status == "succeeded")
        wait_for(lambda: r.zcard(keys.delayed_key(get_store().prefix, "default")) == 1)
    assert lookup_workflow(handle.id).status == "running"


def test_a_later_steps_expiry_counts_from_when_it_is_sent(r):
    handle = chain(wf_member.s({"n": 1, "sleep": 1.2}), wf_collect.s({}, expires=1)).dispatch()
    with worker_thread():
        record = wait_for(lambda: finished(handle.id))
    assert record.status == "succeeded"  # sent after 1.2 s, it had 1 s from then
    assert int(r.get(wf_key("callback-runs"))) == 1


def test_the_first_stages_records_know_their_stream_entries(r):
    # a lookup by id (the admin's task page) then reads the entry instead of searching
    handle = group(wf_member.s({"name": "g1"}), wf_member.s({"name": "g2"}),
                   then=wf_collect.s({"name": "then"})).dispatch()
    prefix = get_store().prefix
    stream = keys.stream_key(prefix, "default")
    for task_id in handle.task_ids[:2]:
        sid = r.hget(keys.record_key(prefix, task_id), "sid")
        [(entry_id, fields)] = r.xrange(stream, sid, sid)
        assert json.loads(fields[keys.ENTRY_FIELD])["id"] == task_id
    assert r.hget(keys.record_key(prefix, handle.task_ids[2]), "sid") is None  # not sent yet
