"""The task page's Terminate button: shown for a running task (even after a plain cancel
it ignored), asks first, then stops it; POST, CSRF and `cancel_task` as Cancel."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from django_taskrunner import cancel, dispatch, lookup
from tests.django.admin_helpers import logged_in, make_user
from tests.testapp.tasks import ignores_cancel, runs_key
from tests.worker_helpers import wait_for, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)
DETAIL = "/admin/django_taskrunner/task/detail/"
CANCEL = "/admin/django_taskrunner/task/cancel/"


@pytest.fixture
def root() -> Client:
    return logged_in(User.objects.create_superuser("root", password="pw"))  # noqa: S106


def test_terminate_asks_first_then_stops_a_task_that_ignores_its_cancel(root, r):
    with worker_thread(("default",), concurrency=1):
        task = dispatch(ignores_cancel, {"n": 1})
        wait_for(lambda: lookup(task.id).status == "running")  # its start write landed
        cancel(task.id)  # ignored: it keeps running
        page = root.get(DETAIL, {"queue": "default", "id": task.id}).content.decode()
        assert "Terminate it now" in page and "Cancel this task" not in page
        form = {"queue": "default", "id": task.id, "terminate": "yes"}
        confirm = root.post(CANCEL, form).content.decode()
        assert "Terminate task" in confirm and "TaskInterrupted" in confirm
        assert lookup(task.id).status == "running"
        done = root.post(CANCEL, {**form, "confirm": "yes"}, follow=True).content.decode()
        assert f"Terminated task {task.id}" in done
        wait_for(lambda: lookup(task.id).status == "cancelled")
    assert not r.hget(runs_key(), "ignores_cancel:finished:1")


def test_terminate_needs_the_cancel_permission_and_csrf(r):
    with worker_thread(("default",), concurrency=1):
        task = dispatch(ignores_cancel, {"n": 2})
        wait_for(lambda: lookup(task.id).status == "running")
        viewer = logged_in(make_user("viewer", "view_task"))
        assert "Terminate it now" not in viewer.get(
            DETAIL, {"queue": "default", "id": task.id}).content.decode()
        form = {"queue": "default", "id": task.id, "terminate": "yes", "confirm": "yes"}
        assert viewer.post(CANCEL, form).status_code == 403
        strict = logged_in(make_user("canceller", "view_task", "cancel_task"),
                           enforce_csrf_checks=True)
        assert strict.post(CANCEL, form).status_code == 403
        assert lookup(task.id).status == "running"
        cancel(task.id, terminate=True)
        wait_for(lambda: lookup(task.id).status == "cancelled")
