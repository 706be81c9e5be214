"""FailedTask rows keep the error class's dotted path as text: rows written before a
class moved module (`django_taskrunner.executor.TaskExpired`, now in `worker/`) still
list, filter, open and retry in the admin, beside rows naming the new path."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Permission, User
from django.utils import timezone

from django_taskrunner.exceptions import TaskExpired
from django_taskrunner.models import FailedTask
from django_taskrunner.store import get_store
from django_taskrunner.worker.failures import describe_error

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/django_taskrunner/failedtask/"
OLD_PATH = "django_taskrunner.executor.TaskExpired"


def make_row(message_id: str, error_class: str) -> FailedTask:
    return FailedTask.objects.create(
        task_name="tests.testapp.tasks.noop", queue="default", message_id=message_id,
        payload=json.dumps({"n": 1}), error_class=error_class,
        error="task 'tests.testapp.tasks.noop' expired before it started",
        traceback="", attempts=0, worker="w1", failed_at=timezone.now(),
    )


@pytest.fixture
def staff_client(client):
    user = User.objects.create_user("ops", password="pw", is_staff=True)  # noqa: S106
    user.user_permissions.add(*Permission.objects.filter(codename__in=[
        "view_failedtask", "delete_failedtask"]))
    client.force_login(user)
    return client


def test_a_row_naming_a_moved_class_lists_filters_and_opens(staff_client):
    new_path = describe_error(TaskExpired("late"))[0]
    assert new_path != OLD_PATH  # the class did move: this test is about old rows
    old_row = make_row("old", OLD_PATH)
    make_row("new", new_path)

    listing = staff_client.get(CHANGELIST)
    assert listing.status_code == 200
    assert OLD_PATH.encode() in listing.content and new_path.encode() in listing.content

    filtered = staff_client.get(CHANGELIST, {"error_class": OLD_PATH})
    assert filtered.status_code == 200
    assert list(filtered.context["cl"].result_list) == [old_row]

    detail = staff_client.get(f"{CHANGELIST}{old_row.pk}/change/")
    assert detail.status_code == 200
    assert OLD_PATH.encode() in detail.content


def test_a_row_naming_a_moved_class_can_be_retried(staff_client):
    row = make_row("old", OLD_PATH)
    response = staff_client.post(CHANGELIST, {
        "action": "retry_selected", "_selected_action": [row.pk], "confirm": "yes"})
    assert response.status_code == 302
    assert not FailedTask.objects.filter(pk=row.pk).exists()
    assert get_store().streams.length("default") == 1
