"""The Tasks page, opened without a choice, shows every queue's tasks together: the
running ones when some run, else the queued ones, not an empty "queued (0)" of one
queue. A chosen queue and status are kept."""

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


def shown(response) -> list[tuple[str, str]]:
    return [(row.queue, row.message_id) for row in response.context["page"].rows]


def test_it_opens_on_the_queued_tasks_of_every_queue(root):
    first = dispatch(on_other_queue, {"n": 1})
    second = dispatch(noop, {"n": 2})
    response = root.get(LIST)
    assert (response.context["queue"], response.context["status"]) == ("", "queued")
    assert response.context["all_queues"]
    # (dispatched in one millisecond, they may share a stream id: either comes first)
    assert sorted(shown(response)) == [("default", second.id), ("other", first.id)]


def test_it_opens_on_running_tasks_when_some_run(root):
    dispatch(on_other_queue, {"n": 1})
    running = dispatch(noop, {"n": 2}, queue="third")
    broker = get_store().streams
    broker.ensure_group("third")
    broker.read("third", "web-1", 1, None)  # it runs there
    response = root.get(LIST)
    assert (response.context["queue"], response.context["status"]) == ("", "running")
    assert shown(response) == [("third", running.id)]


def test_a_chosen_list_is_kept(root):
    dispatch(on_other_queue, {"n": 1})
    response = root.get(LIST, {"queue": "default", "status": "queued"})
    assert (response.context["queue"], response.context["status"]) == ("default", "queued")
