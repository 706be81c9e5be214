"""Messages on priority levels in the admin: the Tasks page lists each level as a stream
of its queue and opens its tasks; a purge removes them (and frees their locks); the
queue's figures count them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client

from django_taskrunner import get_stats
from django_taskrunner.store import get_store, keys
from tests.testapp.tasks import noop, unique_order

pytestmark = pytest.mark.django_db(transaction=True)

LIST = "/admin/django_taskrunner/task/"
DETAIL = "/admin/django_taskrunner/task/detail/"
PURGE = "/admin/django_taskrunner/queue/purge/"


@pytest.fixture
def root() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))  # noqa: S106
    return client


def test_the_tasks_page_lists_a_level_and_opens_its_task(root):
    plain = noop.dispatch({"n": 1})
    urgent = noop.dispatch({"n": 2}, priority=9)

    html = root.get(LIST).content.decode()
    assert "default!9" in html
    level_page = root.get(LIST, {"queue": "default!9"}).content.decode()
    # (two streams' ids may share their stream id: "<sid>@default" is in "<sid>@default!9")
    assert f">{urgent.id}<" in level_page and f">{plain.id}<" not in level_page
    detail = root.get(DETAIL, {"queue": "default!9", "id": urgent.id})
    assert detail.status_code == 200 and urgent.id in detail.content.decode()
    assert root.get(LIST, {"queue": "default!5"}).status_code == 404
    assert root.get(LIST, {"queue": "default!x"}).status_code == 404


def test_a_purge_removes_the_messages_of_every_level_and_frees_their_locks(root):
    broker = get_store().streams
    noop.dispatch({"n": 1})
    noop.dispatch({"n": 2}, priority=0)
    locked = unique_order.dispatch({"order": "p-1"}, priority=8)
    noop.dispatch_delayed({"n": 3}, delay=timedelta(hours=1), priority=1)

    confirm = root.post(PURGE, {"queue": "default"}).content.decode()
    assert "3 waiting messages" in confirm and "1 delayed task" in confirm
    done = root.post(PURGE, {"queue": "default", "confirm": "yes"}, follow=True)

    assert "removed 3 waiting message(s) and 1 delayed task(s)" in done.content.decode()
    for name in ("default", "default!0", "default!8"):
        assert broker.length(name) == 0
    assert broker.client.zcard(keys.delayed_key(broker.prefix, "default!1")) == 0
    assert not broker.client.exists(locked.lock_key)


def test_the_figures_count_the_levels(root):
    noop.dispatch({"n": 1})
    noop.dispatch_many([{"n": n} for n in range(3)], priority=7)
    assert get_stats("default", tasks=False).waiting == 4


DELAYED = "/admin/django_taskrunner/delayedtask/"
DELAYED_ACTION = "/admin/django_taskrunner/delayedtask/action/"


def test_the_delayed_page_lists_a_levels_entries_and_runs_one_on_its_level(root):
    broker = get_store().streams
    plain = noop.dispatch_delayed({"n": 1}, delay=600)
    urgent = noop.dispatch_delayed({"n": 2}, delay=900, priority=9)

    html = root.get(DELAYED, {"queue": "default"}).content.decode()
    assert plain.id in html and urgent.id in html
    score = broker.client.zscore(keys.delayed_key(broker.prefix, "default!9"),
                                 urgent.to_json())
    done = root.post(DELAYED_ACTION, {"action": "run", "queue": "default", "confirm": "yes",
                                      "selected": [f"{int(score)}:{urgent.id}"]})
    assert done.status_code == 302
    assert broker.length("default!9") == 1
    assert broker.client.zcard(keys.delayed_key(broker.prefix, "default!9")) == 0
