"""Purging a queue from the queues dashboard: waiting messages and delayed entries go
(counted), running ones stay, and the locks and task ids the purged ones held are freed;
POST with CSRF, the `purge_task` permission, a confirmation first. And the JSON the
dashboard polls to refresh itself."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client

from django_taskrunner.store import get_store, keys
from tests.django.admin_helpers import logged_in, make_user
from tests.internals import holder_value
from tests.testapp.tasks import noop, on_other_queue, unique_order

pytestmark = pytest.mark.django_db(transaction=True)

PURGE = "/admin/django_taskrunner/queue/purge/"
LIVE = "/admin/django_taskrunner/queue/live/"


@pytest.fixture
def root() -> Client:
    return logged_in(User.objects.create_superuser("root", password="pw"))  # noqa: S106


@pytest.fixture
def full_queue():
    """Default queue: one running unique task, three waiting (one unique, one with a
    task_id), two delayed (one unique); and a message on another queue."""
    broker = get_store().streams
    running = unique_order.dispatch({"order": "run-1"})
    broker.ensure_group("default")
    [(running_sid, _body)] = broker.read("default", "web-1-ab12", 1, None)
    waiting = [noop.dispatch({"n": 1}), unique_order.dispatch({"order": "w-1"}),
               noop.dispatch({"n": 2}, task_id="order-77")]
    delayed = [noop.dispatch_delayed({"n": 3}, delay=timedelta(hours=1)),
               unique_order.dispatch_delayed({"order": "d-1"}, delay=timedelta(hours=2))]
    other = on_other_queue.dispatch({"n": 4})
    return {"running": running, "running_sid": running_sid, "waiting": waiting,
            "delayed": delayed, "other": other}


def test_the_confirmation_counts_what_a_purge_would_remove(root, full_queue):
    response = root.post(PURGE, {"queue": "default"})

    html = response.content.decode()
    assert response.status_code == 200
    assert "3 waiting messages" in html and "2 delayed tasks" in html
    assert "1 running (pending) task stays" in html
    assert get_store().streams.length("default") == 4  # nothing removed yet


def test_a_purge_removes_waiting_and_delayed_and_frees_their_locks(root, full_queue):
    broker = get_store().streams
    client = broker.client

    response = root.post(PURGE, {"queue": "default", "confirm": "yes"}, follow=True)

    assert "removed 3 waiting message(s) and 2 delayed task(s)" in response.content.decode()
    [(sid, _fields)] = client.xrange(broker.stream("default"))
    assert sid.decode() == full_queue["running_sid"]  # the running one stays
    assert client.zcard(keys.delayed_key(broker.prefix, "default")) == 0
    running = full_queue["running"]
    assert client.get(running.lock_key) == holder_value(running).encode()
    waiting_lock, delayed_lock = full_queue["waiting"][1], full_queue["delayed"][1]
    for message in (waiting_lock, delayed_lock):
        assert not client.exists(message.lock_key)
        assert not client.exists(keys.unique_mode_key(broker.prefix, "default",
                                                      message.lock_key))
    assert not client.exists(keys.task_id_key(broker.prefix, "default", "order-77"))
    assert broker.length("other") == 1  # another queue is left alone
    unique_order.dispatch({"order": "w-1"})  # the freed lock no longer blocks a dispatch
    noop.dispatch({"n": 2}, task_id="order-77")


def test_a_purge_leaves_a_lock_a_newer_task_holds(root):
    broker = get_store().streams
    message = unique_order.dispatch({"order": "x"})
    broker.client.set(message.lock_key, "newer#abcdef0123456789")

    root.post(PURGE, {"queue": "default", "confirm": "yes"})

    assert broker.length("default") == 0
    assert broker.client.get(message.lock_key) == b"newer#abcdef0123456789"


def test_a_purge_of_many_messages_goes_in_batches(root):
    noop.dispatch_many([{"n": n} for n in range(1234)])

    response = root.post(PURGE, {"queue": "default", "confirm": "yes"}, follow=True)

    assert "removed 1234 waiting message(s)" in response.content.decode()
    assert get_store().streams.length("default") == 0


def test_a_purge_needs_post_csrf_and_the_permission(full_queue):
    viewer = logged_in(make_user("viewer", "view_queue"))
    purger = logged_in(make_user("purger", "view_queue", "purge_task"),
                       enforce_csrf_checks=True)

    assert viewer.get(PURGE, {"queue": "default"}).status_code == 405
    assert viewer.post(PURGE, {"queue": "default", "confirm": "yes"}).status_code == 403
    assert purger.post(PURGE, {"queue": "default", "confirm": "yes"}).status_code == 403  # CSRF
    assert get_store().streams.length("default") == 4


def test_an_unknown_or_crafted_queue_answers_404(root, full_queue):
    for queue in ("nope", "default}:stream", "", "other#1"):
        assert root.post(PURGE, {"queue": queue, "confirm": "yes"}).status_code == 404
    assert get_store().streams.length("default") == 4


def test_the_dashboard_offers_purge_only_with_the_permission(full_queue):
    viewer = logged_in(make_user("viewer", "view_queue"))
    purger = logged_in(make_user("purger", "view_queue", "purge_task"))

    assert "Purge queue" not in viewer.get("/admin/django_taskrunner/queue/").content.decode()
    assert "Purge queue" in purger.get("/admin/django_taskrunner/queue/").content.decode()


def test_the_dashboard_json_holds_each_queues_figures(root, full_queue):
    data = root.get(LIVE).json()

    assert data["queues"]["default"]["length"] == 4
    assert data["queues"]["default"]["pending"] == 1
    assert set(root.get(LIVE, {"queue": "other"}).json()["queues"]) == {"other"}


def test_the_dashboard_json_needs_the_view_permission():
    assert logged_in(make_user("staff")).get(LIVE).status_code == 403
    assert logged_in(make_user("viewer", "view_queue")).get(LIVE).status_code == 200


def test_a_split_queue_is_purged_shard_by_shard_and_listed_per_shard(root, taskrunner_settings):
    taskrunner_settings(SHARDS={"default": 2})
    broker = get_store().streams
    noop.dispatch_many([{"n": n} for n in range(10)])
    noop.dispatch_delayed({"n": 99}, delay=timedelta(hours=1))
    assert broker.length("default#0") + broker.length("default#1") == 10

    listing = root.get("/admin/django_taskrunner/task/", {"queue": "default"})
    shard_page = root.get("/admin/django_taskrunner/task/", {"queue": "default#1"})
    response = root.post(PURGE, {"queue": "default", "confirm": "yes"}, follow=True)

    assert listing.context["queue"] == "default#0"
    assert {row.queue for row in shard_page.context["page"].rows} == {"default#1"}
    assert "removed 10 waiting message(s) and 1 delayed task(s)" in response.content.decode()
    assert broker.length("default#0") + broker.length("default#1") == 0


def test_undecodable_messages_are_purged_too_and_free_nothing(root):
    broker = get_store().streams
    broker.add("default", "<not json>")
    broker.add_delayed("default", "{\"lock\": \"elsewhere\"}", 10**12)
    decoy = broker.prefix + ":{other}:unique:x"
    broker.client.set(decoy, "someone")

    response = root.post(PURGE, {"queue": "default", "confirm": "yes"}, follow=True)

    assert "removed 1 waiting message(s) and 1 delayed task(s)" in response.content.decode()
    assert broker.client.get(decoy) == b"someone"
