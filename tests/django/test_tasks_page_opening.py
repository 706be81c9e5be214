"""The Tasks page, opened without a choice, shows where something is going on: a queue
with running tasks, else one with queued tasks, not an empty "queued (0)"."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from django_taskrunner import dispatch
from django_taskrunner.store import get_store
from tests.django.admin_helpers import logged_in
from tests.testapp.tasks import noop, on_other_queue

pytestmark = pytest.mark.django_db
LIST = "/admin/django_taskrunner/task/"


@pytest.fixture
def root():
    return logged_in(User.objects.create_superuser("root", password="pw"))  # noqa: S106


def test_it_opens_on_a_queue_with_queued_tasks(root):
    dispatch(on_other_queue, {"n": 1})
    response = root.get(LIST)
    assert (response.context["queue"], response.context["status"]) == ("other", "queued")


def test_it_opens_on_running_tasks_when_some_run(root):
    dispatch(on_other_queue, {"n": 1})
    dispatch(noop, {"n": 2}, queue="third")
    broker = get_store().streams
    broker.ensure_group("third")
    broker.read("third", "web-1", 1, None)  # it runs there
    response = root.get(LIST)
    assert (response.context["queue"], response.context["status"]) == ("third", "running")


def test_a_chosen_list_is_kept(root):
    dispatch(on_other_queue, {"n": 1})
    response = root.get(LIST, {"queue": "default", "status": "queued"})
    assert (response.context["queue"], response.context["status"]) == ("default", "queued")
