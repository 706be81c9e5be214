"""Durable steps (`ctx.step`): a step's result is kept per task id and step name, and a
later attempt of the same task id returns it without calling its `fn` again."""

from __future__ import annotations

import pytest

from django_taskrunner import DuplicateStep, TaskContext
from django_taskrunner.models import FailedTask
from django_taskrunner.store import get_store, keys
from tests.internals import PENDING_TTL_S
from tests.testapp.step_tasks import (
    age_steps,
    allow_key,
    async_three_steps,
    bad_step,
    fails_until_allowed,
    log_key,
    raising_step,
    three_steps,
)

pytestmark = pytest.mark.django_db(transaction=True)


def log(r) -> list[str]:
    return [item.decode() for item in r.lrange(log_key(), 0, -1)]


def test_a_retry_returns_the_kept_steps_without_running_them_again(r, run_burst):
    # Given a task that fails its first attempt after its second step
    message = three_steps.dispatch({"n": 1, "fail": True})

    # When a worker runs it to success (two attempts)
    run_burst()

    # Then each step's fn ran exactly once, across both attempts
    assert [e for e in log(r) if ":key:" not in e] == ["1:a", "1:b", "1:c"]
    assert get_store().streams.pending("default") == 0
    assert not FailedTask.objects.filter(message_id=message.id).exists()


def test_the_kept_steps_live_in_one_hash_per_task_id_with_a_ttl(r, run_burst,
                                                               taskrunner_settings):
    taskrunner_settings(RESULT_TTL=3600)
    message = three_steps.dispatch({"n": 2})
    run_burst()
    key = keys.steps_key(get_store().prefix, message.id)
    assert sorted(k.decode() for k in r.hkeys(key)) == ["a", "b", "c"]
    # A finished task's steps live as long as its record (test_steps_ttl.py)
    assert 0 < r.ttl(key) <= 3600


def test_a_task_without_steps_writes_no_steps_key(r, run_burst):
    from tests.testapp.tasks import noop

    message = noop.dispatch({"n": 1})
    run_burst()
    assert not r.exists(keys.steps_key(get_store().prefix, message.id))


def test_a_step_key_is_stable_per_task_id_and_step(r, run_burst):
    message = three_steps.dispatch({"n": 3, "fail": True})
    run_burst()
    assert f"3:key:{message.id}:a" in log(r)


def test_an_async_task_awaits_its_steps_and_keeps_them(r, run_burst):
    async_three_steps.dispatch({"n": 4})
    run_burst()
    assert log(r) == ["4:a", "4:b", "4:c"]
    assert get_store().streams.pending("default") == 0


def test_a_step_whose_fn_raised_keeps_nothing_and_runs_again(r, run_burst):
    message = raising_step.dispatch({"n": 5})
    run_burst()
    assert log(r) == ["5:r", "5:r"]
    key = keys.steps_key(get_store().prefix, message.id)
    assert r.hkeys(key) == [b"r"]


def test_a_step_result_that_is_not_json_fails_the_attempt_naming_the_step(r, run_burst):
    message = bad_step.dispatch({"kind": "value"})
    run_burst()
    row = FailedTask.objects.get(message_id=message.id)
    assert "InvalidTaskPayload" in row.error
    assert "step 's'" in row.error
    assert not r.exists(keys.steps_key(get_store().prefix, message.id))


@pytest.mark.parametrize("kind, error", [("twice", "DuplicateStep"), ("long", "ValueError"),
                                         ("empty", "ValueError")])
def test_a_bad_step_name_fails_the_attempt(r, run_burst, kind, error):
    message = bad_step.dispatch({"kind": kind})
    run_burst()
    assert error in FailedTask.objects.get(message_id=message.id).error


def test_a_step_outside_a_running_task_raises():
    ctx = TaskContext(id="x", task_name="t", queue="default", attempt=1)
    with pytest.raises(RuntimeError, match="running task"):
        ctx.step("a", len, "abc")


def test_eager_steps_are_kept_across_the_attempts_of_one_call(r, taskrunner_settings):
    taskrunner_settings(EAGER=True)
    three_steps.dispatch({"n": 6, "fail": True})
    assert [e for e in log(r) if ":key:" not in e] == ["6:a", "6:b", "6:c"]


def test_duplicate_step_is_a_public_error():
    from django_taskrunner import TaskRunnerError

    assert issubclass(DuplicateStep, TaskRunnerError)


def test_lookup_shows_the_kept_steps_with_their_results_and_times(r, run_burst):
    from django_taskrunner import lookup

    message = three_steps.dispatch({"n": 7, "fail": True})
    run_burst()
    rec = lookup(message.id)
    assert {name: step["result"] for name, step in rec.steps.items()} == {
        "a": "a-of-7", "b": "b-of-7", "c": "c-of-7"}
    assert all(step["at"] > 0 for step in rec.steps.values())


def test_lookup_of_a_task_without_steps_has_none(run_burst):
    from django_taskrunner import lookup
    from tests.testapp.tasks import noop

    message = noop.dispatch({"n": 2})
    run_burst()
    assert lookup(message.id).steps == {}


def test_an_admin_retry_of_the_failed_row_keeps_the_steps(r, run_burst, client):
    from django.contrib.auth.models import Permission, User

    from django_taskrunner import lookup

    # Given a task that failed for good after two steps
    message = fails_until_allowed.dispatch({"n": 8})
    run_burst()
    row = FailedTask.objects.get(message_id=message.id)
    user = User.objects.create_user("ops", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=[
        "view_failedtask", "delete_failedtask"]))
    client.force_login(user)

    # When the admin retries its row (its steps near their end) and it runs again, now
    # allowed to finish
    age_steps(message.id, 30)
    r.set(allow_key(), 1)
    response = client.post("/admin/django_taskrunner/failedtask/", {
        "action": "retry_selected", "_selected_action": [row.pk], "confirm": "yes"})
    assert response.status_code == 302
    assert not FailedTask.objects.exists()
    # (the retry renewed the steps for as long as its dispatched record lives)
    assert r.ttl(keys.steps_key(get_store().prefix, message.id)) > PENDING_TTL_S - 60
    run_burst()

    # Then its two kept steps did not run again, and it ran under the same id
    assert log(r) == ["8:a", "8:b", "8:c"]
    assert lookup(message.id).status == "succeeded"
