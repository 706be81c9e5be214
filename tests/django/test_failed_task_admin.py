"""The FailedTask admin: read-only rows, filters, and the retry action."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Permission, User
from django.utils import timezone

from django_taskrunner import TaskMessage
from django_taskrunner.broker import get_broker
from django_taskrunner.models import FailedTask

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/django_taskrunner/failedtask/"


def make_row(n: int, task_name: str = "tests.testapp.tasks.noop", payload=None) -> FailedTask:
    return FailedTask.objects.create(
        task_name=task_name, queue="default", message_id=f"m{n}",
        payload=json.dumps(payload if payload is not None else {"n": n}),
        error_class="ValueError", error="ValueError: boom", traceback="Traceback ...",
        attempts=3, worker="w1", failed_at=timezone.now(),
    )


@pytest.fixture
def staff_client(client):
    user = User.objects.create_user("ops", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=[
        "view_failedtask", "delete_failedtask"]))
    client.force_login(user)
    return client


def test_the_changelist_shows_rows_and_escapes_payloads(staff_client):
    row = make_row(1, payload={"html": "<script>alert(1)</script>"})
    page = staff_client.get(CHANGELIST)
    assert page.status_code == 200
    assert b"tests.testapp.tasks.noop" in page.content
    detail = staff_client.get(f"{CHANGELIST}{row.pk}/change/")
    assert detail.status_code == 200
    assert b"<script>alert(1)</script>" not in detail.content
    assert b"&lt;script&gt;" in detail.content


def test_retry_selected_dispatches_again_and_deletes_the_rows(staff_client):
    rows = [make_row(n) for n in range(3)]
    response = staff_client.post(CHANGELIST, {
        "action": "retry_selected", "_selected_action": [r.pk for r in rows[:2]],
    })
    assert response.status_code == 302
    broker = get_broker()
    queued = [TaskMessage.from_json(f[b"m"]) for _i, f in
              broker.client.xrange(broker.stream("default"))]
    assert sorted(m.payload["n"] for m in queued) == [0, 1]
    assert all(m.attempt == 1 for m in queued)
    assert list(FailedTask.objects.values_list("message_id", flat=True)) == ["m2"]


def test_retry_keeps_rows_it_cannot_dispatch(staff_client):
    row = make_row(1, task_name="gone.task")
    staff_client.post(CHANGELIST, {"action": "retry_selected", "_selected_action": [row.pk]})
    assert FailedTask.objects.filter(pk=row.pk).exists()


def test_rows_cannot_be_added_or_changed(staff_client):
    row = make_row(1)
    assert staff_client.get(f"{CHANGELIST}add/").status_code == 403
    response = staff_client.post(f"{CHANGELIST}{row.pk}/change/", {"task_name": "x"})
    assert response.status_code == 403 or FailedTask.objects.get(pk=row.pk).task_name != "x"


def test_non_staff_users_are_sent_to_the_login_page(client):
    User.objects.create_user("joe", password="pw")
    client.login(username="joe", password="pw")
    response = client.get(CHANGELIST)
    assert response.status_code == 302
    assert "/login/" in response["Location"]
