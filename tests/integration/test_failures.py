"""Failed-task records: idempotent per message id, then FAILED_TASK_HANDLER once."""

from __future__ import annotations

import pytest

from django_taskrunner import TaskMessage
from django_taskrunner.models import FailedTask
from django_taskrunner.worker.failures import record_failure
from tests.testapp.tasks import always_fails

pytestmark = pytest.mark.django_db(transaction=True)

HANDLED: list[tuple[str, str]] = []


def remember(message: TaskMessage, error: BaseException) -> None:
    HANDLED.append((message.id, type(error).__name__))


def explode(message: TaskMessage, error: BaseException) -> None:
    raise RuntimeError("a broken handler")


@pytest.fixture(autouse=True)
def clear_handled():
    HANDLED.clear()


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
    assert HANDLED == [(message.id, "ValueError")]


def test_a_handler_that_raises_does_not_stop_the_worker(taskrunner_settings, run_burst, r):
    taskrunner_settings(FAILED_TASK_HANDLER=f"{__name__}.explode")
    always_fails.dispatch({"n": 1})
    always_fails.dispatch({"n": 2})
    run_burst()
    assert FailedTask.objects.count() == 2
