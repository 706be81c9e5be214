"""Edit and retry a failed task: the payload is checked as dispatch() checks it, a refused
one dispatches nothing, a dispatched one deletes the row and is written to its history."""

from __future__ import annotations

import json

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.utils import timezone

from django_taskrunner import TaskMessage
from django_taskrunner.models import FailedTask
from tests.django.admin_helpers import logged_in, make_user
from tests.internals import stream_messages

pytestmark = pytest.mark.django_db


def failed_row(task_name: str = "tests.testapp.tasks.noop", payload: object = None) -> FailedTask:
    return FailedTask.objects.create(
        task_name=task_name, queue="default", message_id="m-1",
        payload=json.dumps(payload if payload is not None else {"n": 1}),
        error="KeyError: 'email'", attempts=3, failed_at=timezone.now())


def url(row: FailedTask) -> str:
    return f"/admin/django_taskrunner/failedtask/{row.pk}/edit/"


def queued(r) -> list[TaskMessage]:
    return stream_messages("default")


@pytest.fixture
def root():
    return logged_in(User.objects.create_superuser("root", "root@example.com", "pw"))


def test_the_form_shows_the_payload_and_the_row_page_links_it(root):
    row = failed_row(payload={"n": 1, "note": "<b>x</b>"})
    page = root.get(url(row)).content.decode()
    assert "&lt;b&gt;x&lt;/b&gt;" in page and "<textarea" in page
    assert url(row) in root.get(f"/admin/django_taskrunner/failedtask/{row.pk}/change/"
                                ).content.decode()


def test_an_edited_payload_is_dispatched_the_row_deleted_and_the_change_logged(root, r):
    row = failed_row()
    response = root.post(url(row), {"payload": '{"n": 2, "fixed": true}'})
    assert response.status_code == 302
    [message] = queued(r)
    assert message.payload == {"n": 2, "fixed": True}
    assert message.task_name == "tests.testapp.tasks.noop"
    assert not FailedTask.objects.filter(pk=row.pk).exists()
    entry = LogEntry.objects.get(object_id=str(row.pk))
    assert message.id in entry.change_message and '"fixed": true' in entry.change_message


@pytest.mark.parametrize("text, why", [
    ('{"n": 2', "This is not JSON"),
    ('{"x": 1}', "Not dispatched"),  # unique_order's key function refuses it
    ("[" * 200 + "]" * 200, "Not dispatched"),  # nested past the payload limit
])
def test_a_refused_payload_shows_the_error_and_dispatches_nothing(root, r, text, why):
    row = failed_row("tests.testapp.tasks.unique_order", {"order": 1})
    response = root.post(url(row), {"payload": text})
    assert response.status_code == 200
    page = response.content.decode()
    assert why in page and 'class="errornote"' in page
    assert queued(r) == []
    assert FailedTask.objects.filter(pk=row.pk).exists()
    assert not LogEntry.objects.exists()


def test_it_needs_change_and_delete_permissions_and_csrf(r):
    row = failed_row()
    viewer = logged_in(make_user("viewer", "view_failedtask", "delete_failedtask"))
    assert viewer.get(url(row)).status_code == 403
    assert viewer.post(url(row), {"payload": "{}"}).status_code == 403
    editor = make_user("editor", "view_failedtask", "change_failedtask", "delete_failedtask")
    strict = logged_in(editor, enforce_csrf_checks=True)
    assert strict.post(url(row), {"payload": "{}"}).status_code == 403
    assert queued(r) == []
    assert logged_in(editor).post(url(row), {"payload": "{}"}).status_code == 302
    assert len(queued(r)) == 1
