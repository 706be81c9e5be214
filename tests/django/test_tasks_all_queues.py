"""The Tasks page's list across all queues: every queue's queued (or running) tasks
merged oldest first, paged with one cursor per stream, each task shown once."""

from __future__ import annotations

from urllib.parse import parse_qs

import pytest
from django.contrib.auth.models import User

from django_taskrunner.admin.tasks import PER_PAGE
from django_taskrunner.store import get_store
from tests.django.admin_helpers import logged_in
from tests.testapp.tasks import noop, on_other_queue

pytestmark = pytest.mark.django_db
LIST = "/admin/django_taskrunner/task/"


def test_pages_through_every_queue_oldest_first_each_task_once(r):
    root = logged_in(User.objects.create_superuser("root", password="pw"))  # noqa: S106
    # Given tasks on two queues, dispatched in one batch each (many share a stream id's
    # millisecond across the queues), more than two pages of them
    ids = {m.id for m in noop.dispatch_many({"n": n} for n in range(PER_PAGE + 10))}
    ids |= {m.id for m in on_other_queue.dispatch_many({"n": n} for n in range(PER_PAGE))}
    broker = get_store().streams
    broker.ensure_group("default")
    broker.read("default", "web-1", 3, None)  # 3 of them run: not queued any more

    # When every page of the queued list is read
    seen: list[str] = []
    keys_seen = []
    query: dict = {"status": "queued"}
    for _page in range(10):
        response = root.get(LIST, query)
        assert response.status_code == 200 and response.context["all_queues"]
        rows = response.context["page"].rows
        seen += [row.message_id for row in rows]
        keys_seen += [tuple(int(p) for p in row.stream_id.split("-")) for row in rows]
        nxt = response.context["next_query"]
        if not nxt:
            break
        query = {k: v[0] for k, v in parse_qs(nxt).items()}

    # Then each queued task shows once, oldest first, 50 a page
    assert len(seen) == len(set(seen)) == len(ids) - 3
    assert set(seen) <= ids
    assert keys_seen == sorted(keys_seen)
    page = root.get(LIST, {"status": "queued"}).content.decode()
    assert f"queued ({len(ids) - 3})" in page and "running (3)" in page


def test_a_crafted_cursor_starts_each_stream_at_its_start(r):
    root = logged_in(User.objects.create_superuser("root", password="pw"))  # noqa: S106
    message = noop.dispatch({"n": 1})
    for after in ("nosuch~1-0", "default~x", "~,~,", "default~99999999999999-0" * 3):
        response = root.get(LIST, {"status": "queued", "after": after})
        assert response.status_code == 200
    response = root.get(LIST, {"status": "queued", "after": "nosuch~1-0"})
    assert [row.message_id for row in response.context["page"].rows] == [message.id]
