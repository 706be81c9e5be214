"""The Tasks page's "finished" list: a queue's recently finished tasks, newest first,
read from their records through the queue's capped finished index; filtered by outcome
and queue, paged by a score cursor; expired records skipped and dropped."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.test import Client

from django_taskrunner import cancel, dispatch, lookup
from django_taskrunner.store import get_store, keys
from django_taskrunner.store.records import RecordWrite
from tests.testapp import tasks
from tests.worker_helpers import app_now_ms

pytestmark = pytest.mark.django_db(transaction=True)

TASKS = "/admin/django_taskrunner/task/"


@pytest.fixture
def root() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))  # noqa: S106
    return client


def listed(html: str) -> list[str]:
    """The task ids of the finished list, in page order."""
    return re.findall(r'<td class="tr-key[^"]*"[^>]*>([^<]+)</td>', html)


def finish(task_id: str, status: str, finished_ms: int, *, queue: str = "default",
           ttl_s: int = 86400, name: str = "tests.testapp.tasks.noop") -> None:
    """A final record write, as the acker sends it (one pipeline)."""
    fields = (("s", status), ("t", name), ("q", queue), ("a", "1"),
              ("st", str(finished_ms - 250)), ("f", str(finished_ms)))
    get_store().records.write([RecordWrite(task_id, fields, ttl_s, final=True)])


def index_ids(queue: str = "default") -> list[str]:
    broker = get_store().streams
    return [member.decode() for member in
            broker.client.zrevrange(keys.finished_key(broker.prefix, queue), 0, -1)]


def test_tasks_the_worker_finished_are_listed_newest_first_with_their_outcome(root):
    ok = tasks.returns_double.dispatch({"n": 1})
    bad = tasks.always_fails.dispatch({"n": 2})
    gone = tasks.noop.dispatch({"n": 3})
    other = dispatch(tasks.noop, {"n": 4}, queue="other")
    assert cancel(gone.id)
    call_command("runtasks", "--burst", "-Q", "default")

    assert {lookup(m.id).status for m in (ok, bad, gone)} == {"succeeded", "failed",
                                                             "cancelled"}
    html = root.get(TASKS, {"queue": "default", "status": "finished"}).content.decode()
    ids = listed(html)
    assert sorted(ids) == sorted([ok.id, bad.id, gone.id]) and other.id not in ids
    ran = [task_id for task_id in ids if task_id != gone.id]  # gone: finished when cancelled
    finished_at = [lookup(task_id).finished_at for task_id in ran]
    assert finished_at == sorted(finished_at, reverse=True)
    assert "tr-status-failed" in html and "ValueError: boom" in html
    assert f'?queue=default&amp;id={quote(ok.id)}"' in html  # the link to its task page
    assert root.get(TASKS, {"queue": "default", "id": ok.id}).status_code == 200

    failed = root.get(TASKS, {"queue": "default", "status": "finished",
                              "outcome": "failed"}).content.decode()
    assert listed(failed) == [bad.id]
    cancelled = root.get(TASKS, {"queue": "default", "status": "finished",
                                 "outcome": "cancelled"}).content.decode()
    assert listed(cancelled) == [gone.id]
    assert listed(root.get(TASKS, {"queue": "other", "status": "finished"}
                           ).content.decode()) == []  # not run: nothing finished there


def test_pages_follow_the_score_cursor_through_ties_without_gaps_or_repeats(root):
    now = app_now_ms()
    expected = []
    for n in range(130):  # three finish times, many ids finished in one millisecond
        finish(f"t-{n:03d}", "succeeded", now - 1000 * (n // 50))
    for n in range(130):
        expected.append(f"t-{n:03d}")
    seen: list[str] = []
    query = {"queue": "default", "status": "finished"}
    for _ in range(5):
        html = root.get(TASKS, query).content.decode()
        seen += listed(html)
        found = re.search(r'href="\?([^"]+)" class="next-page"', html)
        if not found:
            break
        query = dict(pair.split("=", 1) for pair in found.group(1).replace("&amp;", "&")
                     .split("&"))
        query = {key: value.replace("%3A", ":") for key, value in query.items()}
    assert len(seen) == 130 and sorted(seen) == expected
    by_time = [int(name[2:]) // 50 for name in seen]
    assert by_time == sorted(by_time)  # newest first


def test_the_index_keeps_the_newest_ids_and_none_older_than_the_records_ttl(
        taskrunner_settings):
    taskrunner_settings(FINISHED_LIST_SIZE=5)
    now = app_now_ms()
    finish("old", "succeeded", now - 86400_000 - 1)  # a write later, past the records' TTL
    assert index_ids() == ["old"]
    for n in range(6):  # 1% over 5 is 6: trimmed at the 7th id, not before
        finish(f"t-{n}", "failed", now - 1000 + n)
    assert index_ids() == [f"t-{n}" for n in range(5, 0, -1)]  # "old" went first
    finish("t-6", "failed", now)
    assert index_ids() == [f"t-{n}" for n in range(6, 0, -1)]
    for n in range(7, 20):
        finish(f"t-{n}", "failed", now + n)
        assert 5 <= len(index_ids()) <= 6
    assert index_ids()[:5] == [f"t-{n}" for n in range(19, 14, -1)]


def test_an_expired_record_is_skipped_and_dropped_from_the_index(root):
    now = app_now_ms()
    for n in range(3):
        finish(f"t-{n}", "succeeded", now + n)
    broker = get_store().streams
    broker.client.delete(keys.record_key(broker.prefix, "t-1"))  # as its TTL would

    html = root.get(TASKS, {"queue": "default", "status": "finished"}).content.decode()
    assert listed(html) == ["t-2", "t-0"]
    assert index_ids() == ["t-2", "t-0"]


def test_a_filter_that_matches_few_reads_at_most_scan_ids_and_says_so(root):
    failed_only = {"queue": "default", "status": "finished", "outcome": "failed"}
    scan = root.get(TASKS, failed_only).context["finished_scan"]  # ids a page reads at most

    now = app_now_ms()
    finish("the-failed-one", "failed", now - 10_000)
    for n in range(scan + 10):
        finish(f"ok-{n}", "succeeded", now + n)
    response = root.get(TASKS, failed_only)
    page = response.context["finished"]
    assert page.rows == [] and page.scanned == scan and page.stopped
    more = root.get(TASKS, {**failed_only, "after": page.next_cursor}).context["finished"]
    assert [row.task_id for row in more.rows] == ["the-failed-one"]
    assert more.next_cursor == ""
    html = response.content.decode()
    assert f"at most {scan} a page" in html and 'class="next-page"' in html


def test_no_index_is_written_when_the_list_is_off(taskrunner_settings):
    taskrunner_settings(FINISHED_LIST_SIZE=0)
    finish("t-1", "succeeded", app_now_ms())
    assert lookup("t-1").status == "succeeded"
    assert index_ids() == []


def test_output_is_escaped_and_the_page_needs_the_view_permission(root):
    finish("<b>id</b>", "failed", app_now_ms(), name="<script>x</script>")
    html = root.get(TASKS, {"queue": "default", "status": "finished"}).content.decode()
    assert "<script>x</script>" not in html and "&lt;script&gt;x&lt;/script&gt;" in html
    assert "<b>id</b>" not in html

    staff = User.objects.create_user("staff", password="pw", is_staff=True)  # noqa: S106
    client = Client()
    client.force_login(staff)
    assert client.get(TASKS, {"queue": "default", "status": "finished"}).status_code == 403
    staff.user_permissions.add(Permission.objects.get(
        codename="view_task", content_type__app_label="django_taskrunner"))
    assert client.get(TASKS, {"queue": "default", "status": "finished"}).status_code == 200
    assert Client().get(TASKS, {"status": "finished"}).status_code == 302


def test_a_crafted_cursor_or_outcome_shows_the_first_page(root):
    finish("t-1", "succeeded", app_now_ms())
    for cursor, outcome in (("nope", "x"), ("1:-1", ""), ("9" * 60 + ":0", "running")):
        html = root.get(TASKS, {"queue": "default", "status": "finished", "after": cursor,
                                "outcome": outcome}).content.decode()
        assert listed(html) == ["t-1"]


def test_the_index_expires_with_its_longest_record_and_is_never_shortened():
    broker = get_store().streams
    index = keys.finished_key(broker.prefix, "default")
    finish("short", "succeeded", app_now_ms(), ttl_s=30)
    assert 0 < broker.client.ttl(index) <= 30
    finish("long", "succeeded", app_now_ms(), ttl_s=7200)
    assert 7100 < broker.client.ttl(index) <= 7200
    finish("short-again", "succeeded", app_now_ms(), ttl_s=30)
    assert broker.client.ttl(index) > 7100


def test_a_task_name_wraps_after_its_dots_and_stays_escaped(root):
    now = app_now_ms()
    finish("t-name", "succeeded", now, name="shop.tasks.<b>send_receipt</b>")
    html = root.get(TASKS, {"queue": "default", "status": "finished"}).content.decode()
    assert "shop.<wbr>tasks.<wbr>&lt;b&gt;send_receipt&lt;/b&gt;</a>" in html
    assert "<b>send_receipt" not in html
