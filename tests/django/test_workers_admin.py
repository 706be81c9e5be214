"""The Workers page: one row per worker process from its heartbeat, lost ones marked
then dropped; a cleanly stopped worker leaves the page and its consumer groups."""

from __future__ import annotations

import os
import socket

import pytest
from django.contrib.auth.models import User
from django.test import Client

from django_taskrunner import dispatch
from django_taskrunner.store import get_store, keys
from tests.django.admin_helpers import logged_in, make_user
from tests.testapp.tasks import marked_sleeper, runs_key
from tests.worker_helpers import app_now_ms, wait_for, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)
PAGE = "/admin/django_taskrunner/worker/"


@pytest.fixture
def root() -> Client:
    return logged_in(User.objects.create_superuser("root", "root@example.com", "pw"))


def page_with(client: Client, text: str) -> str | None:
    page = client.get(PAGE).content.decode()
    return page if text in page else None


def test_a_running_worker_is_listed_with_its_running_task_and_leaves_when_stopped(root, r):
    task = dispatch(marked_sleeper, {"n": 1, "seconds": 3})
    with worker_thread(("default",), stats_interval=0.2) as worker:
        wait_for(lambda: r.hget(runs_key(), "marked_sleeper:start:1"))
        page = wait_for(lambda: page_with(root, task.id))
        assert worker.consumer in page
        assert socket.gethostname() in page and str(os.getpid()) in page
        assert ">live<" in page and "tests.testapp.tasks.marked_sleeper" in page
    assert worker.consumer not in root.get(PAGE).content.decode()
    broker = get_store().streams
    consumers = r.xinfo_consumers(broker.stream("default"), broker.group)
    assert worker.consumer not in {c["name"].decode() for c in consumers}


def test_a_worker_whose_heartbeat_expired_is_marked_lost_then_dropped(root, r, prefix):
    now = app_now_ms()
    r.zadd(keys.workers_key(prefix), {"gone-1": now - 30_000, "long-gone-2": now - 20 * 60_000})
    page = root.get(PAGE).content.decode()
    assert "gone-1" in page and ">lost<" in page
    with worker_thread(("default",), stats_interval=0.2):  # its heartbeat drops the old one
        wait_for(lambda: r.zscore(keys.workers_key(prefix), "long-gone-2") is None)
    assert "gone-1" in root.get(PAGE).content.decode()


def test_a_heartbeat_key_of_the_wrong_type_is_a_row_marked_unreadable(root, r, prefix):
    r.zadd(keys.workers_key(prefix), {"odd-1": app_now_ms()})
    r.rpush(keys.worker_key(prefix, "odd-1"), "x")
    page = root.get(PAGE).content.decode()
    assert "odd-1" in page and ">unreadable<" in page


def test_the_page_needs_its_view_permission():
    assert logged_in(make_user("nobody")).get(PAGE).status_code == 403
    assert logged_in(make_user("viewer", "view_worker")).get(PAGE).status_code == 200
