"""Django's Tasks framework on runtasks: enqueue, run, read results, signals."""

from __future__ import annotations

import logging
import sys
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from django_taskrunner import InvalidTaskPayload, TaskMessage, get_redis
from django_taskrunner.backends import level_for
from django_taskrunner.compat import (
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from django_taskrunner.conf import get_settings
from django_taskrunner.models import FailedTask
from django_taskrunner.store import keys
from tests.testapp import framework_tasks
from tests.testapp.tasks import runs_key

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
    assert FailedTask.objects.get().task_name == "tests.testapp.framework_tasks.fails"


def test_stats_count_framework_tasks_under_their_own_names(run_burst):
    from django_taskrunner import get_stats

    framework_tasks.add.enqueue(1, 1)
    framework_tasks.fails.enqueue("broken")
    run_burst()
    counts = {figures.name: (figures.succeeded, figures.failed)
              for figures in get_stats("default").tasks}
    assert counts == {"tests.testapp.framework_tasks.add": (1, 0),
                      "tests.testapp.framework_tasks.fails": (0, 1)}


def test_the_admin_retries_a_failed_framework_task_through_the_shim(run_burst, client):
    from django.contrib.auth.models import Permission, User

    result = framework_tasks.fails.enqueue("broken")
    run_burst()
    row = FailedTask.objects.get()
    user = User.objects.create_user("ops", password="pw", is_staff=True)  # noqa: S106
    user.user_permissions.add(*Permission.objects.filter(codename__in=[
        "view_failedtask", "delete_failedtask"]))
    client.force_login(user)
    client.post(f"/admin/django_taskrunner/failedtask/{row.pk}/retry/", {"confirm": "yes"})
    assert not FailedTask.objects.filter(pk=row.pk).exists()  # dispatched again

    run_burst()
    again = FailedTask.objects.get()
    assert again.task_name == "tests.testapp.framework_tasks.fails"
    assert again.message_id != row.message_id
    result.refresh()
    assert result.status == TaskResultStatus.FAILED  # the first run's result stays
    assert len(result.errors) == 1  # its own run's error (docs/django-tasks.md)


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
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result("nope")


def test_the_framework_validation_errors_are_raised():
    with pytest.raises(InvalidTask):
        framework_tasks.add.using(priority=101)  # the framework's range is -100..100
    with pytest.raises(InvalidTask):
        framework_tasks.add.using(queue_name="not-served")
    with pytest.raises(InvalidTask):
        task(lambda: None)  # not a module-level function


def test_args_that_are_not_json_are_refused_at_enqueue():
    with pytest.raises(TypeError):  # the framework's contract
        framework_tasks.add.enqueue(object(), 1)


def test_a_payload_too_deep_is_a_type_error_naming_the_users_function():
    deep: list = []
    for _ in range(200):
        deep = [deep]
    with pytest.raises(InvalidTaskPayload) as caught:
        framework_tasks.add.enqueue(deep, 1)
    assert isinstance(caught.value, TypeError)
    assert "tests.testapp.framework_tasks.add" in str(caught.value)
    assert "run_django_task" not in str(caught.value)


# -- run_after: deferred tasks wait in the delayed set ---------------------------------------


def queue_sizes(r, prefix: str, queue: str = "default") -> tuple[int, int]:
    """(messages on the stream, entries in the delayed set) of one queue."""
    return r.xlen(keys.stream_key(prefix, queue)), r.zcard(keys.delayed_key(prefix, queue))


def test_the_backend_supports_run_after():
    assert task_backends["default"].supports_defer is True


def test_a_deferred_task_waits_in_the_delayed_set_until_run_after(run_burst, r, prefix):
    run_after = timezone.now() + timedelta(seconds=0.4)
    result = framework_tasks.add.using(run_after=run_after).enqueue(4, 5)

    assert queue_sizes(r, prefix) == (0, 1)
    assert result.status == TaskResultStatus.READY
    assert result.task.run_after == run_after
    due_ms = r.zrange(keys.delayed_key(prefix, "default"), 0, 0, withscores=True)[0][1]
    assert due_ms == int(run_after.timestamp() * 1000)

    run_burst()  # not due yet: the burst worker leaves it waiting
    result.refresh()
    assert result.status == TaskResultStatus.READY
    assert queue_sizes(r, prefix) == (0, 1)

    # A real wait: the result's started_at is stamped with timezone.now(), not the app's
    # clock (tests/worker_helpers.app_now_ms), so moving that clock would not reach it
    time.sleep(max(0.0, (run_after - timezone.now()).total_seconds()) + 0.05)
    run_burst()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 9
    assert result.started_at >= run_after
    assert framework_tasks.add.get_result(result.id).task.run_after == run_after


def test_a_run_after_already_past_runs_at_once(run_burst, r, prefix):
    result = framework_tasks.add.using(
        run_after=timezone.now() - timedelta(minutes=5)).enqueue(1, 2)
    assert queue_sizes(r, prefix) == (1, 0)
    run_burst()
    result.refresh()
    assert result.return_value == 3


def test_a_deferred_result_is_kept_past_its_wait(r, prefix):
    result = framework_tasks.add.using(run_after=timezone.now() + timedelta(hours=2)).enqueue(1, 1)
    assert r.ttl(keys.record_key(prefix, result.id)) > 2 * 3600
    assert framework_tasks.add.get_result(result.id).status == TaskResultStatus.READY
    assert framework_tasks.add.get_result(result.id).status == TaskResultStatus.READY


def test_a_deferred_enqueue_sends_task_enqueued_and_keeps_the_queue(r, prefix):
    seen = []

    def receiver(sender, task_result, **kwargs):
        seen.append(task_result.task.run_after)

    task_enqueued.connect(receiver)
    try:
        run_after = timezone.now() + timedelta(minutes=1)
        framework_tasks.on_framework_queue.using(run_after=run_after).enqueue("x")
    finally:
        task_enqueued.disconnect(receiver)
    assert seen == [run_after]
    assert queue_sizes(r, prefix, "framework") == (0, 1)


def test_a_naive_run_after_is_refused_by_the_framework():
    with pytest.raises(InvalidTask):
        framework_tasks.add.using(run_after=timezone.now().replace(tzinfo=None))


# -- the shim runs only this project's framework tasks (a message is data, not code) ---------

SIDE_EFFECT_MODULE = "tests.django.import_side_effect"


def forged(func, backend="default"):
    """What anyone who can write to the stream could queue for the shim."""
    return {"result_id": "forged", "backend": backend, "func": func, "args": [], "kwargs": {}}


@pytest.mark.parametrize("func", [
    f"{SIDE_EFFECT_MODULE}.anything",  # outside every installed app, not imported
    "this.s",  # the Zen of Python, printed at import
    "os.system",  # an imported module, but not a framework task
    "tests.testapp.tasks.runs_key",  # inside an installed app, but not a framework task
    "tests.testapp.no_such_module.task",
    ".relative.path",
    ["not", "a", "string"],
])
def test_the_shim_refuses_a_path_that_is_not_a_framework_task_and_never_imports_it(
    run_burst, tmp_path, monkeypatch, func
):
    from django_taskrunner import dispatch

    flag = tmp_path / "imported"
    monkeypatch.setenv("TASKRUNNER_TEST_SIDE_EFFECT_FILE", str(flag))
    dispatch("django_taskrunner.run_django_task", forged(func))

    run_burst()

    assert not flag.exists()
    assert SIDE_EFFECT_MODULE not in sys.modules and "this" not in sys.modules
    row = FailedTask.objects.get()
    assert row.task_name == "django_taskrunner.run_django_task"
    assert row.error_class.endswith("InvalidTaskPayload")
    assert f"refusing to run framework task {func!r}" in row.error


def test_the_shim_refuses_a_backend_that_is_not_ours(run_burst):
    from django_taskrunner import dispatch

    dispatch("django_taskrunner.run_django_task",
             forged("tests.testapp.framework_tasks.add", backend="nope"))
    run_burst()
    assert "backend 'nope'" in FailedTask.objects.get().error


def test_a_framework_task_in_a_module_no_worker_imported_yet_still_runs(
    run_burst, r, monkeypatch
):
    """Inside an installed app, a module is imported on demand, as before."""
    from django_taskrunner import dispatch
    from tests.testapp.tasks import runs_key

    module = "tests.testapp.lazy_framework_tasks"
    monkeypatch.delitem(sys.modules, module, raising=False)  # as in a fresh worker
    dispatch("django_taskrunner.run_django_task", forged(f"{module}.count"))
    run_burst()
    assert r.hget(runs_key(), "framework:lazy") == b"1"
    assert not FailedTask.objects.exists()


def test_get_result_refuses_a_forged_record(r, prefix, tmp_path, monkeypatch):
    import json

    flag = tmp_path / "imported"
    monkeypatch.setenv("TASKRUNNER_TEST_SIDE_EFFECT_FILE", str(flag))
    result = framework_tasks.add.enqueue(1, 2)
    record_key = keys.record_key(prefix, result.id)
    part = json.loads(r.hget(record_key, "fw"))
    r.hset(record_key, "fw", json.dumps({**part, "func": f"{SIDE_EFFECT_MODULE}.add"}))
    with pytest.raises(ValueError, match="refusing to run framework task"):
        task_backends["default"].get_result(result.id)
    assert not flag.exists()


def test_the_result_is_the_task_record(run_burst, r, prefix):
    from django_taskrunner import lookup

    result = framework_tasks.add.enqueue(2, 5)
    assert lookup(result.id).status == "queued"
    run_burst()
    record = lookup(result.id)
    assert (record.status, record.result) == ("succeeded", 7)
    assert record.task_name == "django_taskrunner.run_django_task"
    fetched = framework_tasks.add.get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL and fetched.return_value == 7
    assert fetched.worker_ids == [record.worker]
    # kept for the backend's RESULT_TTL (3600 in tests.settings), not the app's
    assert 3600 - 5 <= r.ttl(keys.record_key(prefix, result.id)) <= 3600


def test_a_failed_record_reads_back_as_a_task_error(run_burst):
    result = framework_tasks.fails.enqueue("broken")
    run_burst()
    [error] = framework_tasks.fails.get_result(result.id).errors
    assert error.exception_class_path == "builtins.ValueError"
    assert "broken" in error.traceback


def test_a_cancelled_task_reads_back_as_failed(run_burst):
    from django_taskrunner import cancel

    result = framework_tasks.add.enqueue(1, 1)
    assert cancel(result.id)
    run_burst()
    fetched = framework_tasks.add.get_result(result.id)
    assert fetched.status == TaskResultStatus.FAILED and fetched.errors == []


def test_a_result_record_of_the_previous_release_still_reads_back(r, prefix):
    import json

    r.set(keys.result_key(prefix, "0" * 32), json.dumps({
        "func": "tests.testapp.framework_tasks.add", "queue": "default",
        "backend": "default", "priority": 0, "run_after": None, "status": "SUCCESSFUL",
        "enqueued_at": "2026-01-01T00:00:00+00:00", "started_at": "2026-01-01T00:00:01+00:00",
        "finished_at": "2026-01-01T00:00:02+00:00",
        "last_attempted_at": "2026-01-01T00:00:01+00:00", "args": [1, 2], "kwargs": {},
        "errors": [], "worker_ids": ["host-1"], "return_value": 3}), ex=60)
    fetched = framework_tasks.add.get_result("0" * 32)
    assert fetched.status == TaskResultStatus.SUCCESSFUL and fetched.return_value == 3


def test_a_message_of_the_previous_release_still_runs(run_burst, r, prefix):
    from django_taskrunner import dispatch

    dispatch("django_taskrunner.run_django_task",
             {**forged("tests.testapp.framework_tasks.add"), "result_id": "1" * 32,
              "args": [1, 2]})
    run_burst()
    assert framework_tasks.add.get_result("1" * 32).return_value == 3


def test_without_task_records_results_have_records_of_their_own(run_burst,
                                                                 taskrunner_settings):
    taskrunner_settings(RESULT_TTL=0)
    result = framework_tasks.add.enqueue(4, 4)
    run_burst()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 8


# -- priority: the framework's -100..100 onto the levels 0..9 ---------------------------------


@pytest.mark.parametrize(("priority", "level"), [
    (-100, 0), (-81, 0), (-80, 1), (-21, 3), (-20, 4), (-1, 4), (0, 5), (1, 6), (25, 6),
    (26, 7), (50, 7), (75, 8), (76, 9), (100, 9)])
def test_a_framework_priority_maps_onto_a_level_keeping_the_order(priority, level):
    assert level_for(priority) == level


@pytest.mark.parametrize("result_ttl", [None, 0])  # with task records, and without
def test_higher_framework_priorities_run_first(run_burst, r, taskrunner_settings, result_ttl):
    if result_ttl is not None:
        taskrunner_settings(RESULT_TTL=result_ttl)
    for priority in (-100, 0, 100, -30, 60):
        framework_tasks.note_order.using(priority=priority).enqueue(str(priority))
    run_burst("--concurrency", "1")
    order = [tag.decode() for tag in r.lrange(f"{runs_key()}:order", 0, -1)]
    assert order == ["100", "60", "0", "-30", "-100"]


def test_a_deferred_task_keeps_its_framework_priority(run_burst, r):
    later = framework_tasks.note_order.using(
        priority=100, run_after=timezone.now() + timedelta(seconds=0.2))
    later.enqueue("deferred")
    framework_tasks.note_order.enqueue("plain")
    assert TaskMessage.from_json(
        r.zrange(keys.delayed_key(get_settings().PREFIX, "default!9"), 0, 0)[0]).priority == 9


# -- the worker's log names the user's function ------------------------------------------


def test_a_failure_logs_the_users_function_and_one_traceback(run_burst, caplog):
    framework_tasks.add.enqueue(1, 1)
    framework_tasks.fails.enqueue("broken")
    run_burst()  # default verbosity (-v 1)

    records = caplog.records
    assert not [r for r in records if "run_django_task" in r.getMessage()]
    [failed] = [r for r in records if "failed for good" in r.getMessage()]
    assert "task=tests.testapp.framework_tasks.fails" in failed.getMessage()
    assert len([r for r in records if r.exc_info]) == 1  # one traceback
    framework = [r for r in records if r.name in ("django.tasks", "django_tasks")]
    assert not [r for r in framework if r.levelno < logging.WARNING]  # quiet at -v 1


def test_the_frameworks_own_lines_show_at_verbosity_2(run_burst, caplog):
    caplog.set_level(logging.INFO, logger="django_tasks")  # the backport's logger
    framework_tasks.add.enqueue(1, 1)
    run_burst("-v", "2")
    lines = [r.getMessage() for r in caplog.records if r.name in ("django.tasks", "django_tasks")]
    assert any("state=SUCCESSFUL" in line for line in lines)


def test_a_low_priority_task_read_with_higher_ones_is_handed_out_after_them(run_burst):
    """The bound docs/priorities.md states: within one read, a lower level is handed to
    the threads after every higher message read with it; threads free at that moment
    start side by side, so at most THREADS - 1 higher tasks may start after it."""
    threads, higher = 8, 30
    framework_tasks.note_order.using(priority=-100).enqueue("low")  # queued first
    for n in range(higher):
        framework_tasks.note_order.enqueue(f"d{n}")
    run_burst("--concurrency", str(threads), "--batch-size", "50")  # one read takes all
    order = get_redis().lrange(f"{runs_key()}:order", 0, -1)
    assert len(order) == higher + 1
    assert order.index(b"low") >= higher - (threads - 1)
