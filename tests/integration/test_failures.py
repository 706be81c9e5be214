"""Failed-task records: idempotent per dispatch (message id and dispatch token), then
FAILED_TASK_HANDLER once."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from django_taskrunner import TaskExecutionError, TaskMessage, dispatch
from django_taskrunner.exceptions import TimeLimitExceeded
from django_taskrunner.models import FailedTask
from django_taskrunner.store import get_store
from django_taskrunner.worker.failures import record_failure
from tests.testapp.tasks import always_fails, expiring, stops_when_cancelled
from tests.worker_helpers import MovableClock

pytestmark = pytest.mark.django_db(transaction=True)

HANDLED: list[tuple[str, str]] = []
KEPT: list[tuple[TaskMessage, BaseException]] = []
FIRST_DISPATCH, SECOND_DISPATCH = "a1", "b2"  # two dispatch tokens


def remember(message: TaskMessage, error: BaseException) -> None:
    HANDLED.append((message.id, type(error).__name__))


def keep(message: TaskMessage, error: BaseException) -> None:
    KEPT.append((message, error))


def explode(message: TaskMessage, error: BaseException) -> None:
    raise RuntimeError("a broken handler")


@pytest.fixture(autouse=True)
def clear_handled():
    HANDLED.clear()
    KEPT.clear()


def test_recording_one_message_twice_writes_one_row_and_calls_the_handler_once(
        taskrunner_settings):
    taskrunner_settings(FAILED_TASK_HANDLER=f"{__name__}.remember")
    message = TaskMessage(id="abc", task_name="t", queue="default", payload={"x": 1})
    record_failure(message, ValueError("first"), attempts=1, worker="w")
    record_failure(message, ValueError("replayed"), attempts=1, worker="w")
    assert FailedTask.objects.get().error == "ValueError: first"
    assert HANDLED == [("abc", "ValueError")]


def test_the_handler_gets_the_message_and_the_exception_after_the_last_attempt(
        taskrunner_settings, run_burst):
    taskrunner_settings(FAILED_TASK_HANDLER=f"{__name__}.remember")
    message = always_fails.dispatch({"n": 1})
    run_burst()
    assert HANDLED == [(message.id, "TaskExecutionError")]


def test_the_handler_gets_a_task_execution_error_wrapping_what_the_task_raised(
        taskrunner_settings, run_burst):
    # Given a task that raises ValueError on each of its three attempts
    taskrunner_settings(FAILED_TASK_HANDLER=f"{__name__}.keep")
    message = always_fails.dispatch({"n": 1})

    run_burst()

    # Then the handler got a TaskExecutionError naming the task, wrapping the ValueError
    [(handled, error)] = KEPT
    assert handled.id == message.id
    assert isinstance(error, TaskExecutionError)
    assert (error.task_name, error.message_id) == (always_fails.name, message.id)
    assert isinstance(error.error, ValueError) and error.__cause__ is error.error
    assert str(error) == (f"task {always_fails.name!r} (id {message.id!r}) failed: "
                          "ValueError: boom {'n': 1}")
    # And the row describes the task's own exception
    row = FailedTask.objects.get()
    assert (row.error_class, row.error) == ("ValueError", "ValueError: boom {'n': 1}")
    assert "raise ValueError" in row.traceback and "TaskExecutionError" not in row.traceback


def test_a_task_that_never_ran_gives_the_handler_the_apps_own_error(
        taskrunner_settings, run_burst, monkeypatch):
    taskrunner_settings(FAILED_TASK_HANDLER=f"{__name__}.keep")
    expiring.dispatch({"n": 1}, expires=0.001)
    MovableClock.install(monkeypatch).advance(0.01)

    run_burst()

    [(_handled, error)] = KEPT
    assert type(error).__name__ == "TaskExpired" and not isinstance(error, TaskExecutionError)


def test_a_time_limit_reaches_the_handler_wrapped_like_any_failure(
        taskrunner_settings, run_burst):
    taskrunner_settings(FAILED_TASK_HANDLER=f"{__name__}.keep")
    stops_when_cancelled.dispatch({"n": 1})

    run_burst()

    [(_handled, error)] = KEPT
    assert isinstance(error, TaskExecutionError) and isinstance(error.error, TimeLimitExceeded)


def test_a_handler_that_raises_does_not_stop_the_worker(taskrunner_settings, run_burst, r):
    taskrunner_settings(FAILED_TASK_HANDLER=f"{__name__}.explode")
    always_fails.dispatch({"n": 1})
    always_fails.dispatch({"n": 2})
    run_burst()
    assert FailedTask.objects.count() == 2


def test_one_dispatch_recorded_twice_is_one_row_and_another_dispatch_of_its_id_another(
        taskrunner_settings):
    taskrunner_settings(FAILED_TASK_HANDLER=f"{__name__}.remember")
    first = TaskMessage(id="nightly", task_name="t", queue="default", payload={"n": 1},
                        has_task_id=True, dispatch_token=FIRST_DISPATCH)
    record_failure(first, ValueError("first"), attempts=1, worker="w")
    record_failure(first, ValueError("replayed"), attempts=1, worker="w")
    second = replace(first, payload={"n": 2}, dispatch_token=SECOND_DISPATCH)
    record_failure(second, ValueError("second"), attempts=1, worker="w")

    rows = FailedTask.objects.order_by("pk")
    assert [(row.message_id, row.dispatch_token, row.error) for row in rows] == [
        ("nightly", FIRST_DISPATCH, "ValueError: first"),
        ("nightly", SECOND_DISPATCH, "ValueError: second")]
    assert len(HANDLED) == 2


def test_a_reused_task_id_that_fails_for_good_again_is_recorded_again(
        taskrunner_settings, run_burst, admin_client):
    # Given a task_id whose task failed for good, then was dispatched again and failed again
    taskrunner_settings(FAILED_TASK_HANDLER=f"{__name__}.remember")
    dispatch(always_fails, {"n": 1}, task_id="nightly")
    run_burst()
    dispatch(always_fails, {"n": 2}, task_id="nightly")
    run_burst()

    # Then each failure has its row and its handler call
    rows = list(FailedTask.objects.order_by("pk"))
    assert [(row.message_id, json.loads(row.payload)) for row in rows] == [
        ("nightly", {"n": 1}), ("nightly", {"n": 2})]
    assert len(HANDLED) == 2 and {message_id for message_id, _error in HANDLED} == {"nightly"}

    # And the admin lists both, and retries the second one with its own payload
    changelist = "/admin/django_taskrunner/failedtask/"
    page = admin_client.get(changelist).content.decode()
    assert all(f"{changelist}{row.pk}/change/" in page for row in rows)
    admin_client.post(f"{changelist}{rows[1].pk}/retry/", {"confirm": "yes"})
    broker = get_store().streams
    [(_stream_id, fields)] = broker.client.xrange(broker.stream("default"))
    assert TaskMessage.from_json(fields[b"m"]).payload == {"n": 2}
    assert list(FailedTask.objects.values_list("pk", flat=True)) == [rows[0].pk]
