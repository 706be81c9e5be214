"""How long durable steps are kept: as long as their task's record. Each record write
(an attempt's start and beats, a retry, a put-back, the final write) gives the steps the
record's TTL, so a task that retries for longer than any fixed window keeps them, and a
finished task's steps go with its record."""

from __future__ import annotations

import pytest

from django_taskrunner import lookup
from django_taskrunner.store import get_store, keys
from django_taskrunner.store.records import RecordWrite
from tests.internals import PENDING_TTL_S
from tests.testapp.step_tasks import retries_late, three_steps

pytestmark = pytest.mark.django_db(transaction=True)


def steps_ttl(r, task_id: str) -> int:
    return r.ttl(keys.steps_key(get_store().prefix, task_id))


def test_a_finished_task_keeps_its_steps_as_long_as_its_record(r, run_burst,
                                                              taskrunner_settings):
    # Given a short RESULT_TTL
    taskrunner_settings(RESULT_TTL=60)

    # When a task with steps succeeds on its second attempt
    message = three_steps.dispatch({"n": 1, "fail": True})
    run_burst()

    # Then its steps expire with its record, not a week later
    assert lookup(message.id).status == "succeeded"
    record_ttl = r.ttl(keys.record_key(get_store().prefix, message.id))
    assert 0 < steps_ttl(r, message.id) <= 60
    assert abs(steps_ttl(r, message.id) - record_ttl) <= 1


def test_a_retry_renews_the_steps_past_a_short_result_ttl(r, run_burst, taskrunner_settings):
    # Given a 1-second RESULT_TTL and a task whose first attempt keeps a step, finds its
    # steps with 30 seconds left (as if it had run for days) and fails, its retry an
    # hour away
    taskrunner_settings(RESULT_TTL=1)
    message = retries_late.dispatch({"n": 2})

    # When the worker schedules the retry
    run_burst()

    # Then the steps live as long as the retrying record: a week from the retry
    assert lookup(message.id).status == "retrying"
    assert steps_ttl(r, message.id) > PENDING_TTL_S - 60
    assert r.hkeys(keys.steps_key(get_store().prefix, message.id)) == [b"a"]


def test_every_record_write_gives_the_steps_the_records_ttl(r):
    # Given a task id whose steps have 30 seconds left
    get_store().steps.keep("t-1", "a", '{"result": 1, "at": 0}', ttl_seconds=30)
    records = get_store().records

    # When its next attempt starts (a pending record write), its steps live as long as
    # the pending record
    records.write([RecordWrite("t-1", (("s", "running"), ("a", "2")), PENDING_TTL_S,
                               steps=True)])
    assert steps_ttl(r, "t-1") > PENDING_TTL_S - 60

    # And when it ends, as long as the finished record
    records.write([RecordWrite("t-1", (("s", "succeeded"), ("a", "2"), ("q", "default")),
                               120, final=True, steps=True)])
    assert 0 < steps_ttl(r, "t-1") <= 120


def test_a_write_that_says_its_task_has_no_steps_leaves_them_alone(r):
    # (the worker says so for a first run that kept none: the script spares the key)
    get_store().steps.keep("t-3", "a", '{"result": 1, "at": 0}', ttl_seconds=30)
    get_store().records.write([RecordWrite("t-3", (("s", "running"), ("a", "1")), 600)])
    assert steps_ttl(r, "t-3") <= 30


def test_a_record_write_of_a_task_without_steps_creates_no_steps_key(r):
    prefix = get_store().prefix
    get_store().records.write([RecordWrite("t-2", (("s", "running"), ("a", "1")), 60,
                                           steps=True)])
    assert not r.exists(keys.steps_key(prefix, "t-2"))


def test_a_task_cancelled_meanwhile_keeps_its_steps_as_long_as_its_record(r):
    # Given a retrying task with steps, cancelled while it waited (its record final, kept
    # two minutes; the cancel touches the record only)
    get_store().steps.keep("t-4", "a", '{"result": 1, "at": 0}', ttl_seconds=PENDING_TTL_S)
    records = get_store().records
    records.write([RecordWrite("t-4", (("s", "cancelled"), ("a", "2"), ("q", "default")),
                               120, final=True)])
    assert steps_ttl(r, "t-4") > 120

    # When its worker writes the attempt's outcome, which the cancel overrides
    records.write([RecordWrite("t-4", (("s", "failed"), ("a", "2"), ("q", "default")),
                               3600, final=True, steps=True)])

    # Then the steps expire with the cancelled record
    assert lookup("t-4") is not None and lookup("t-4").status == "cancelled"
    assert 0 < steps_ttl(r, "t-4") <= 120
