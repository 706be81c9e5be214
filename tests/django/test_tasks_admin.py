"""The admin's Tasks pages: queued and running tasks read a page at a time from the stream,
a task's own page with its links, and the JSON the running list polls; for permitted
staff only, everything escaped, unknown ids and queues 404."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_taskrunner.models import FailedTask
from django_taskrunner.store import get_store
from tests.django.admin_helpers import logged_in, make_user
from tests.internals import stream_messages
from tests.testapp.tasks import noop, unique_order

pytestmark = pytest.mark.django_db(transaction=True)

LIST = "/admin/django_taskrunner/task/"
DETAIL = "/admin/django_taskrunner/task/detail/"
LIVE = "/admin/django_taskrunner/task/live/"
SCRIPT = "<script>alert('x')</script>"


@pytest.fixture
def root() -> Client:
    return logged_in(User.objects.create_superuser("root", password="pw"))  # noqa: S106


def stream_id_of(message_id: str, queue: str = "default") -> str:
    for message in stream_messages(queue):
        if message.id == message_id:
            assert message.stream_id is not None
            return message.stream_id
    raise AssertionError(f"{message_id} is not in the stream")


def test_the_urls_are_the_admin_ones():
    assert reverse("admin:django_taskrunner_task_changelist") == LIST
    assert reverse("admin:django_taskrunner_task_detail") == DETAIL


def test_queued_tasks_are_listed_oldest_first_and_escaped(root):
    first = noop.dispatch({"n": 1, "note": SCRIPT})
    second = noop.dispatch({"n": 2})

    html = root.get(LIST, {"queue": "default"}).content.decode()

    assert first.id in html and second.id in html
    assert html.index(first.id) < html.index(second.id)
    assert SCRIPT not in html and "&lt;script&gt;" in html
    assert "queued (2)" in html


def test_queued_tasks_page_through_with_stream_id_cursors(root):
    sent = noop.dispatch_many([{"n": n} for n in range(120)])

    first = root.get(LIST, {"queue": "default"})
    page = first.context["page"]
    assert [row.message_id for row in page.rows] == [m.id for m in sent[:50]]
    second = root.get(LIST, {"queue": "default", "after": page.next_cursor})
    assert [row.message_id for row in second.context["page"].rows] == [m.id for m in sent[50:100]]
    back = root.get(LIST, {"queue": "default",
                           "before": second.context["page"].previous_cursor})
    assert [row.message_id for row in back.context["page"].rows] == [m.id for m in sent[:50]]
    last = root.get(LIST, {"queue": "default",
                           "after": second.context["page"].next_cursor}).context["page"]
    assert [row.message_id for row in last.rows] == [m.id for m in sent[100:]]
    assert last.next_cursor == ""


def test_a_search_finds_a_task_by_name_or_id(root):
    noop.dispatch_many([{"n": n} for n in range(30)])
    wanted = unique_order.dispatch({"order": "A-1"})

    by_name = root.get(LIST, {"queue": "default", "q": "UNIQUE_ORD"}).context["page"]
    by_id = root.get(LIST, {"queue": "default", "q": wanted.id}).context["page"]

    assert [row.message_id for row in by_name.rows] == [wanted.id]
    assert [row.message_id for row in by_id.rows] == [wanted.id]


def test_running_tasks_show_their_worker_idle_time_and_deliveries(root):
    held = noop.dispatch({"n": 1, "note": SCRIPT})
    noop.dispatch({"n": 2})
    broker = get_store().streams
    broker.ensure_group("default")
    broker.read("default", "web-1-<b>evil</b>", 1, None)

    html = root.get(LIST, {"queue": "default", "status": "running"}).content.decode()

    assert held.id in html and "web-1-&lt;b&gt;evil&lt;/b&gt;" in html
    assert "<b>evil</b>" not in html and SCRIPT not in html
    assert "running (1)" in html and "queued (1)" in html
    assert 'data-live-url="' in html


def test_the_running_list_json_holds_the_rows_as_plain_values(root):
    held = noop.dispatch({"note": SCRIPT})
    broker = get_store().streams
    broker.ensure_group("default")
    broker.read("default", "web-1-ab12", 1, None)

    data = root.get(LIVE, {"queue": "default"}).json()

    [row] = data["rows"]
    assert row["id"] == held.id and row["consumer"] == "web-1-ab12"
    assert SCRIPT in row["payload"]  # JSON: the script inserts it as text
    assert row["url"].startswith(DETAIL)
    assert root.get(LIVE, {"queue": "nope"}).status_code == 404


def test_a_queued_tasks_page_shows_what_the_stream_holds_with_its_links(root):
    message = unique_order.dispatch({"order": SCRIPT})
    FailedTask.objects.create(task_name=message.task_name, queue="default",
                              message_id=message.id, payload="{}", error_class="ValueError",
                              error="ValueError: no", failed_at=timezone.now())
    stream_id = stream_id_of(message.id)

    response = root.get(DETAIL, {"queue": "default", "stream": stream_id})

    html = response.content.decode()
    assert response.status_code == 200
    assert "queued" in html and message.id in html and stream_id in html
    assert SCRIPT not in html and "&lt;script&gt;" in html
    assert "held by this task" in html
    assert "/admin/django_taskrunner/uniquelock/?queue=default" in html
    assert "/admin/django_taskrunner/failedtask/" in html and "tr-failed-link" in html


def test_a_task_is_found_by_its_message_id_running_or_delayed(root):
    running = noop.dispatch({"n": 1})
    broker = get_store().streams
    broker.ensure_group("default")
    broker.read("default", "web-1-ab12", 1, None)
    delayed = noop.dispatch_delayed({"n": 2}, delay=timedelta(hours=1))

    running_page = root.get(DETAIL, {"queue": "default", "id": running.id})
    delayed_page = root.get(DETAIL, {"queue": "default", "id": delayed.id})

    assert running_page.context["facts"].status == "running"
    assert running_page.context["facts"].consumer == "web-1-ab12"
    assert delayed_page.context["facts"].status == "delayed"
    assert "/admin/django_taskrunner/delayedtask/?queue=default" in delayed_page.content.decode()


def test_a_failed_row_alone_still_opens_the_task_page(root):
    FailedTask.objects.create(task_name="t", queue="default", message_id="gone-1",
                              payload='{"a": 1}', failed_at=timezone.now())

    response = root.get(DETAIL, {"queue": "default", "id": "gone-1"})

    assert response.status_code == 200 and "not in Redis any more" in response.content.decode()


@pytest.mark.parametrize("query", [
    {"queue": "default", "stream": "1-1"},  # no such entry
    {"queue": "default", "stream": "not-an-id"},
    {"queue": "default", "id": "nobody"},
    {"queue": "no-such-queue", "id": "x"},
    {"queue": "default}:stream", "stream": "1-1"},  # a crafted key part
    {"queue": "", "stream": ""},
])
def test_unknown_ids_and_queues_answer_404(root, query):
    noop.dispatch({"n": 1})
    assert root.get(DETAIL, query).status_code == 404


def test_an_id_of_another_queue_is_not_found_through_this_one(root):
    from tests.testapp.tasks import on_other_queue

    other = on_other_queue.dispatch({"n": 1})
    stream_id = stream_id_of(other.id, "other")

    assert root.get(DETAIL, {"queue": "other", "stream": stream_id}).status_code == 200
    assert root.get(DETAIL, {"queue": "default", "stream": stream_id}).status_code == 404
    assert root.get(DETAIL, {"queue": "default", "id": other.id}).status_code == 404


def test_an_unknown_queue_on_the_list_answers_404(root):
    assert root.get(LIST, {"queue": "nope"}).status_code == 404


def test_the_pages_need_staff_and_the_view_permission():
    noop.dispatch({"n": 1})
    outsider = logged_in(make_user("outsider", "view_task", staff=False))
    staff = logged_in(make_user("staff"))
    viewer = logged_in(make_user("viewer", "view_task"))

    for url in (LIST, LIVE + "?queue=default"):
        assert outsider.get(url).status_code == 302
        assert staff.get(url).status_code == 403
        assert viewer.get(url).status_code == 200


def test_a_lock_holder_opens_the_task_page(root):
    message = unique_order.dispatch({"order": "B-7"})

    html = root.get("/admin/django_taskrunner/uniquelock/").content.decode()

    assert f"{DETAIL}?queue=default&amp;id={message.id}" in html


def test_a_delayed_entry_and_a_failed_row_open_the_task_page(root):
    delayed = noop.dispatch_delayed({"n": 1}, delay=timedelta(hours=1))
    row = FailedTask.objects.create(task_name="t", queue="default", message_id="m-1",
                                    payload="{}", failed_at=timezone.now())

    delayed_html = root.get("/admin/django_taskrunner/delayedtask/?queue=default").content
    failed_html = root.get(f"/admin/django_taskrunner/failedtask/{row.pk}/change/").content

    assert f"{DETAIL}?queue=default&amp;id={delayed.id}&amp;from=delayed".encode() in delayed_html
    assert f"{DETAIL}?queue=default&amp;id=m-1&amp;from=failed".encode() in failed_html
    page = root.get(DETAIL, {"queue": "default", "id": delayed.id, "from": "delayed"})
    assert page.context["facts"].status == "delayed"
    assert root.get(DETAIL, {"queue": "default", "id": "m-1", "from": "failed"}).status_code == 200


def test_a_task_far_down_a_long_stream_is_found_by_its_id(root):
    noop.dispatch_many([{"n": n} for n in range(4500)])  # more than two search batches
    wanted = noop.dispatch({"n": "last", "id": "decoy"})

    facts = root.get(DETAIL, {"queue": "default", "id": wanted.id}).context["facts"]

    assert facts.status == "queued" and facts.message_id == wanted.id
    assert root.get(DETAIL, {"queue": "default", "id": "decoy"}).status_code == 404


def test_the_running_list_shows_one_workers_tasks(root):
    noop.dispatch_many([{"n": n} for n in range(3)])
    broker = get_store().streams
    broker.ensure_group("default")
    broker.read("default", "web-1-ab12", 1, None)
    broker.read("default", "web-2-cd34", 2, None)

    page = root.get(LIST, {"queue": "default", "status": "running",
                           "consumer": "web-2-cd34"}).context["page"]

    assert [row.consumer for row in page.rows] == ["web-2-cd34", "web-2-cd34"]
