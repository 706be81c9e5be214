"""A unique lock or a task record whose Redis key holds another type is no fault of
the worker nor of other tasks: the task runs and is settled (its entry acked), the
error is logged naming the task, and the tasks beside it run as usual."""

from __future__ import annotations

import logging

import pytest

from django_taskrunner import cancel, lookup
from django_taskrunner.models import FailedTask
from django_taskrunner.store import get_store, keys
from tests.integration.scheduling_helpers import running_worker, wait_for
from tests.testapp.tasks import noop, runs_key, unique_order

pytestmark = pytest.mark.django_db(transaction=True)


def pending(r) -> int:
    broker = get_store().streams
    return r.xpending(broker.stream("default"), broker.group)["pending"]


def test_a_unique_lock_of_the_wrong_type_does_not_stop_its_task(r, caplog):
    # Given a unique task queued, whose lock key then holds a list
    message = unique_order.dispatch({"order": "o-1"})
    assert message.lock_key is not None
    r.delete(message.lock_key)
    r.rpush(message.lock_key, "not a lock")
    others = noop.dispatch_many([{"n": n} for n in range(5)])
    with caplog.at_level(logging.ERROR), running_worker("default"):
        # When the worker runs it: it runs once, and it and the others are settled
        wait_for(lambda: r.hget(runs_key(), "unique_order:o-1") == b"1", 30)
        wait_for(lambda: all(r.hget(runs_key(), f"noop:{n}") for n in range(5)), 30)
        wait_for(lambda: pending(r) == 0, 30)
    assert len(others) == 5
    assert not FailedTask.objects.exists()
    assert any(message.id in rec.getMessage() for rec in caplog.records)


def test_a_record_of_the_wrong_type_does_not_stop_its_task(r):
    # Given a task queued, whose record key then holds a string
    message = noop.dispatch({"n": "rec"})
    record = keys.record_key(get_store().prefix, message.id)
    r.delete(record)
    r.set(record, "not a record")
    noop.dispatch_many([{"n": n} for n in range(5)])
    with running_worker("default"):
        # When the worker runs: the task runs once, and everything is settled
        wait_for(lambda: r.hget(runs_key(), "noop:rec") == b"1", 30)
        wait_for(lambda: all(r.hget(runs_key(), f"noop:{n}") for n in range(5)), 30)
        wait_for(lambda: pending(r) == 0, 30)
    assert r.hget(runs_key(), "noop:rec") == b"1"
    assert not FailedTask.objects.exists()


@pytest.mark.parametrize("sid", ["garbage", "1-x", ""])
def test_a_record_naming_no_stream_entry_is_cancelled_by_the_cancelled_set(r, sid):
    """A queued record whose 'sid' is not a stream id: cancel() answers, deletes no entry
    (`cancel_entry.lua` asks nothing of the stream with it) and the worker skips the
    task by the cancelled set."""
    message = noop.dispatch({"n": "corrupt-sid"}, task_id="corrupt-sid-1")
    record = keys.record_key(get_store().prefix, message.id)
    r.hset(record, "sid", sid)
    stream = get_store().streams.stream("default")
    assert r.xlen(stream) == 1
    assert cancel(message.id) is True
    assert r.xlen(stream) == 1  # left to the worker, which skips it
    with running_worker("default"):
        wait_for(lambda: r.xlen(stream) == 0, 30)  # skipped: acked and deleted
    assert lookup(message.id).status == "cancelled"
    assert r.hget(runs_key(), "noop:corrupt-sid") is None
