"""Django's Tasks framework contract, as its documentation states it, against our backend.

Written from the framework's documented behaviour (django.tasks on Django 6, the
django-tasks backport on 5.2): enqueue, get_result, refresh, the status transitions,
errors, return values, priority, queue_name, run_after, takes_context and the
`TypeError` for arguments that are not JSON. Runs on both Django versions.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_taskrunner import get_redis
from django_taskrunner.compat import (
    InvalidTask,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
)
from tests.testapp import framework_tasks
from tests.testapp.tasks import runs_key

try:
    from django.tasks.exceptions import TaskResultMismatch
except ImportError:
    from django_tasks.exceptions import TaskResultMismatch  # the backport
pytestmark = pytest.mark.django_db(transaction=True)


def test_enqueue_returns_a_ready_result_of_the_task():
    result = framework_tasks.add.enqueue(1, 2)
    assert isinstance(result, TaskResult)
    assert result.status == TaskResultStatus.READY
    assert result.task == framework_tasks.add
    assert result.args == [1, 2] and result.kwargs == {}
    assert result.backend == "default"
    assert result.enqueued_at is not None
    assert result.started_at is None and result.finished_at is None
    assert result.last_attempted_at is None
    assert result.errors == [] and result.worker_ids == []
    assert not result.is_finished


def test_get_result_equals_the_enqueued_result():
    result = framework_tasks.add.enqueue(1, 2)
    assert framework_tasks.add.get_result(result.id) == result
    assert task_backends["default"].get_result(result.id) == result


def test_refresh_leaves_an_unchanged_result_unchanged():
    result = framework_tasks.add.enqueue(1, 2)
    before = (result.status, result.enqueued_at, result.args, result.kwargs, result.errors)
    result.refresh()
    assert (result.status, result.enqueued_at, result.args, result.kwargs,
            result.errors) == before
    assert framework_tasks.add.get_result(result.id) == result


def test_a_result_goes_from_ready_to_successful(run_burst):
    result = framework_tasks.add.enqueue(2, 3)
    run_burst()
    assert result.status == TaskResultStatus.READY  # a result changes only on refresh()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.is_finished
    assert result.return_value == 5
    assert result.errors == []
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.last_attempted_at == result.started_at
    assert len(result.worker_ids) == 1 and result.attempts == 1


def test_the_return_value_of_an_unfinished_result_raises():
    result = framework_tasks.add.enqueue(2, 3)
    with pytest.raises(ValueError):
        result.return_value  # noqa: B018 - the framework raises until it is finished


def test_a_failed_result_has_its_error_and_no_return_value(run_burst):
    result = framework_tasks.fails.enqueue("broken")
    run_burst()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result.is_finished
    [error] = result.errors
    assert error.exception_class is ValueError
    assert error.traceback.startswith("Traceback") and "broken" in error.traceback
    with pytest.raises(ValueError):
        result.return_value  # noqa: B018


def test_an_unknown_result_id_does_not_exist():
    with pytest.raises(TaskResultDoesNotExist):
        framework_tasks.add.get_result("0-0")
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result("no-such-id")


def test_kwargs_and_json_values_round_trip(run_burst):
    result = framework_tasks.add.enqueue(a=[1], b=[2])
    assert result.kwargs == {"a": [1], "b": [2]}
    run_burst()
    fetched = framework_tasks.add.get_result(result.id)
    assert fetched.kwargs == {"a": [1], "b": [2]}
    assert fetched.return_value == [1, 2]


@pytest.mark.parametrize("value", [object(), {1, 2}, timezone.now(), 1j])
def test_arguments_that_are_not_json_raise_type_error(value, r, prefix):
    before = sorted(r.keys(f"{prefix}*"))
    with pytest.raises(TypeError):
        framework_tasks.add.enqueue(value, 1)
    with pytest.raises(TypeError):
        framework_tasks.add.enqueue(a=1, b=value)
    assert sorted(r.keys(f"{prefix}*")) == before  # nothing was queued


def test_arguments_are_normalised_as_the_framework_does(run_burst):
    result = framework_tasks.add.enqueue((1,), [2])  # a tuple is a list in JSON
    assert result.args == [[1], [2]]
    run_burst()
    assert framework_tasks.add.get_result(result.id).return_value == [1, 2]


def test_a_task_runs_on_its_queue_name(run_burst):
    result = framework_tasks.on_framework_queue.enqueue("hi")
    assert result.task.queue_name == "framework"
    run_burst("--queue", "default")  # another queue's worker leaves it alone
    result.refresh()
    assert result.status == TaskResultStatus.READY
    run_burst("--queue", "framework")
    result.refresh()
    assert result.return_value == "HI"


def test_using_a_queue_the_backend_does_not_serve_is_invalid():
    with pytest.raises(InvalidTask):
        framework_tasks.add.using(queue_name="elsewhere")


def test_priority_out_of_range_is_invalid_and_in_range_is_kept():
    with pytest.raises(InvalidTask):
        framework_tasks.add.using(priority=-101)
    result = framework_tasks.add.using(priority=-100).enqueue(1, 1)
    assert result.task.priority == -100
    assert framework_tasks.add.get_result(result.id).task.priority == -100


def test_higher_priorities_start_first(run_burst):
    for priority in (-100, 0, 100, -5, 50):
        framework_tasks.note_order.using(priority=priority).enqueue(str(priority))
    run_burst("--concurrency", "1")
    assert get_redis().lrange(f"{runs_key()}:order", 0, -1) == [
        b"100", b"50", b"0", b"-5", b"-100"]


def test_a_run_after_result_is_ready_until_due(run_burst):
    run_after = timezone.now() + timedelta(hours=1)
    result = framework_tasks.add.using(run_after=run_after).enqueue(1, 1)
    assert result.task.run_after == run_after
    run_burst()
    result.refresh()
    assert result.status == TaskResultStatus.READY
    assert result.task.run_after == run_after
    assert framework_tasks.add.get_result(result.id) == result


def test_a_context_task_gets_its_attempt_and_result(run_burst):
    result = framework_tasks.with_context.enqueue("x")
    run_burst()
    result.refresh()
    assert result.return_value == {"attempt": 1, "id": result.id, "tag": "x"}


def test_a_finished_result_reads_back_equal(run_burst):
    result = framework_tasks.add.enqueue(4, 4)
    run_burst()
    result.refresh()
    again = framework_tasks.add.get_result(result.id)
    assert again == result
    assert again.return_value == 8


def test_get_result_of_another_task_does_not_exist():
    result = framework_tasks.add.enqueue(4, 4)
    with pytest.raises(TaskResultMismatch):
        framework_tasks.fails.get_result(result.id)
