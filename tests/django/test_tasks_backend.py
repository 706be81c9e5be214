"""Django's Tasks framework on runtasks: enqueue, run, read results, signals."""

from __future__ import annotations

import pytest

from django_taskrunner.compat import (
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task,
    task_enqueued,
    task_finished,
    task_started,
)
from django_taskrunner.models import FailedTask
from tests.testapp import framework_tasks

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_enqueued_task_runs_on_runtasks_and_its_result_reads_back(run_burst):
    result = framework_tasks.add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    assert result.enqueued_at is not None

    run_burst()

    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.started_at <= result.finished_at
    assert result.attempts == 1
    fetched = framework_tasks.add.get_result(result.id)
    assert fetched.return_value == 5 and fetched.args == [2, 3]


def test_a_task_on_another_queue_runs_there(run_burst):
    result = framework_tasks.on_framework_queue.enqueue("hi")
    run_burst("--queue", "framework")
    result.refresh()
    assert result.return_value == "HI"


def test_a_failing_task_reports_its_error_and_traceback(run_burst):
    result = framework_tasks.fails.enqueue("broken")
    run_burst()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class is ValueError
    assert "broken" in error.traceback
    with pytest.raises(ValueError):
        result.return_value  # noqa: B018 - the framework raises for a failed task
    assert FailedTask.objects.get().task_name == "django_taskrunner.run_django_task"


def test_a_context_task_gets_the_attempt_and_the_result_id(run_burst):
    result = framework_tasks.with_context.enqueue("x")
    run_burst()
    result.refresh()
    assert result.return_value == {"attempt": 1, "id": result.id, "tag": "x"}


def test_the_framework_signals_fire_in_order(run_burst):
    seen: list[tuple[str, str]] = []

    def on(name):
        def receiver(sender, task_result, **kwargs):
            seen.append((name, str(task_result.status)))
        return receiver

    receivers = [(task_enqueued, on("enqueued")), (task_started, on("started")),
                 (task_finished, on("finished"))]
    for signal, receiver in receivers:
        signal.connect(receiver)
    try:
        framework_tasks.add.enqueue(1, 1)
        run_burst()
    finally:
        for signal, receiver in receivers:
            signal.disconnect(receiver)
    assert seen == [("enqueued", "READY"), ("started", "RUNNING"), ("finished", "SUCCESSFUL")]


def test_an_unknown_result_id_raises_does_not_exist():
    from django_taskrunner.compat import task_backends

    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result("nope")


def test_the_framework_validation_errors_are_raised():
    with pytest.raises(InvalidTask):
        framework_tasks.add.using(priority=10)  # this backend does not support priority
    with pytest.raises(InvalidTask):
        framework_tasks.add.using(queue_name="not-served")
    with pytest.raises(InvalidTask):
        task(lambda: None)  # not a module-level function


def test_args_that_are_not_json_are_refused_at_enqueue():
    with pytest.raises(ValueError):
        framework_tasks.add.enqueue(object(), 1)
