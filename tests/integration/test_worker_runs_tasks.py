"""The worker runs what was dispatched, each task exactly once, and records failures."""

from __future__ import annotations

import pytest

from django_taskrunner import dispatch
from django_taskrunner.models import FailedTask
from django_taskrunner.store import get_store
from tests.testapp.tasks import always_fails, fails_twice, noop, runs_key, with_context

pytestmark = pytest.mark.django_db(transaction=True)


def runs(r, name: str) -> dict[str, int]:
    counts = r.hgetall(runs_key())
    return {k.decode().split(":", 1)[1]: int(v) for k, v in counts.items()
            if k.decode().startswith(name + ":")}


def test_a_thousand_dispatched_tasks_each_run_exactly_once(r, run_burst):
    # Given 1,000 tasks, half dispatched one by one and half in one round trip
    for n in range(500):
        dispatch(noop, {"n": n})
    noop.dispatch_many({"n": n} for n in range(500, 1000))

    # When a worker drains the queue
    run_burst("--queue", "default")

    # Then every task ran exactly once and the stream is empty
    counts = runs(r, "noop")
    assert len(counts) == 1000
    assert set(counts.values()) == {1}
    broker = get_store().streams
    assert broker.length("default") == 0
    assert broker.pending("default") == 0


def test_a_task_failing_with_max_retry_2_makes_three_attempts_and_one_failed_row(r, run_burst):
    message = always_fails.dispatch({"n": 7})

    run_burst("--queue", "default")

    assert runs(r, "always_fails") == {"7": 3}
    row = FailedTask.objects.get()
    assert row.message_id == message.id
    assert row.task_name == "tests.testapp.tasks.always_fails"
    assert row.attempts == 3
    assert row.error_class == "ValueError"
    assert "boom" in row.error
    assert "Traceback" in row.traceback
    assert row.queue == "default"


def test_a_task_that_succeeds_on_its_third_attempt_leaves_no_failed_row(r, run_burst):
    fails_twice.dispatch({"n": 1})

    run_burst()

    assert runs(r, "fails_twice") == {"1": 3}
    assert FailedTask.objects.count() == 0


def test_garbage_in_the_stream_becomes_failed_rows_while_tasks_around_it_run(r, run_burst):
    broker = get_store().streams
    stream = broker.stream("default")
    noop.dispatch({"n": 1})
    r.xadd(stream, {"m": b"\xff\xfe not json"})
    r.xadd(stream, {"m": '{"v": 1, "id": "x1", "task": "no.such.task", "payload": 1}'})
    r.xadd(stream, {"m": '[1, 2, 3]'})
    r.xadd(stream, {"other": "field"})
    r.xadd(stream, {"m": '{"v": 99, "id": "x2", "task": "tests.testapp.tasks.noop"}'})
    noop.dispatch({"n": 2})

    run_burst("--queue", "default")

    assert runs(r, "noop") == {"1": 1, "2": 1}
    assert FailedTask.objects.count() == 5
    errors = set(FailedTask.objects.values_list("error_class", flat=True))
    assert errors == {"django_taskrunner.exceptions.InvalidTaskPayload",
                      "django_taskrunner.exceptions.TaskNotFound"}
    assert broker.length("default") == 0
    assert broker.pending("default") == 0


def test_a_context_task_gets_its_name_attempt_and_id(r, run_burst):
    message = with_context.dispatch({"n": 3})

    run_burst()

    value = r.hget(runs_key(), "ctx:3").decode()
    assert value == f"tests.testapp.tasks.with_context|1|{message.id}"
