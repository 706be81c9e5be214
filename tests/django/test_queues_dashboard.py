"""The admin's queues dashboard: every figure of each queue, the leader and the last-hour
chart (inline SVG, nothing from a CDN), for permitted staff only, everything escaped."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from django_taskrunner import LeaderElection
from django_taskrunner.store import get_store, keys
from tests.django.admin_helpers import logged_in, make_user
from tests.internals import write_heartbeat
from tests.testapp.tasks import always_fails, noop, sleep_20ms
from tests.worker_helpers import app_now_ms

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/admin/django_taskrunner/queue/"


@pytest.fixture
def root() -> Client:
    return logged_in(User.objects.create_superuser("root", password="pw"))


def cells(html: str, queue: str) -> list[str]:
    """The summary row of `queue`, as the text of its cells."""
    row = re.search(rf'<tr>\s*<td><a href="#queue-{queue}">{queue}</a></td>(.*?)</tr>', html,
                    re.S)
    assert row, f"no summary row for {queue}"
    return [re.sub(r"<[^>]+>", "", cell).strip()
            for cell in re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)]


@pytest.fixture
def busy_queue(run_burst, r, prefix):
    """A queue that ran tasks (one failed for good), has three waiting, one consumer with
    a live heartbeat, and a leader."""
    sleep_20ms.dispatch_many({"n": n} for n in range(4))
    always_fails.dispatch({"n": "x"})
    run_burst("--queue", "default", "--consumer-name", "web-1-ab12", "--concurrency", "2")
    noop.dispatch_many({"n": n} for n in range(3))
    # the burst worker left its group as it stopped: a live one is in it
    broker = get_store().streams
    r.xgroup_createconsumer(broker.stream("default"), broker.group, "web-1-ab12")
    now = app_now_ms()
    pipe = r.pipeline()
    write_heartbeat(pipe, "web-1-ab12", ["default"], threads=2, busy=0, max_workers=2,
                    started_ms=now, now_ms=now, window=200, ttl=30)
    pipe.execute()
    LeaderElection(r, keys.leader_key(prefix, get_store().group), lease=30,
                   identity="web-1-ab12:77aa").try_acquire()


def test_the_url_is_the_admin_one():
    assert reverse("admin:django_taskrunner_queue_changelist") == URL


def test_every_figure_of_the_queue_is_shown(root, busy_queue):
    text = root.get(URL).content.decode()

    length, lag, pending, workers, threads, rate, avg, p95, wait, pickup, failed = cells(
        text, "default")
    assert (length, lag, pending, workers, threads) == ("3", "3", "0", "1", "2 (0)")
    assert float(rate) > 0
    assert avg.endswith("ms") and p95.endswith("ms")
    assert wait.endswith("ms")  # 3 waiting x ~20 ms / 2 threads
    assert re.fullmatch(r"[\d.]+ (ms|s) / [\d.]+ (ms|s)", pickup), pickup  # avg / p95
    assert failed == "1"
    assert re.search(r'<td>≤ [^<]+</td><td class="num">[1-9]\d*</td>', text)  # histogram
    assert "Leader of consumer group" in text and "web-1-ab12:77aa" in text
    assert "tests.testapp.tasks.sleep_20ms" in text  # per-task figures
    consumer = re.search(r'<td class="tr-key">web-1-ab12</td>\s*<td>(\w+)</td>\s*'
                         r'<td class="num">(\d+)</td>\s*<td class="num">([^<]+)</td>', text)
    assert consumer and consumer.group(1) == "live" and consumer.group(2) == "0"
    assert consumer.group(3).endswith(("ms", " s"))  # its idle time


def test_the_numbers_match_manage_py_taskrunner_stats(root, busy_queue):
    import io
    import json

    from django.core.management import call_command

    out = io.StringIO()
    call_command("taskrunner_stats", "--json", "-Q", "default", stdout=out)
    [figures] = json.loads(out.getvalue())
    text = root.get(URL).content.decode()

    length, lag, pending, *_rest, failed = cells(text, "default")
    assert [int(length), int(lag), int(pending), int(failed)] == [
        figures["length"], figures["lag"], figures["pending"], figures["failed_last_hour"]]
    assert figures["leader"]["holder"] == "web-1-ab12:77aa"


def test_the_chart_is_inline_svg_with_a_bar_per_busy_minute(root, busy_queue):
    text = root.get(URL, {"queue": "default"}).content.decode()

    svg = re.search(r'<svg class="tr-chart".*?</svg>', text, re.S).group(0)
    assert 'class="done"' in svg and 'class="failed"' in svg
    tooltips = re.findall(r"<title>\d\d:\d\d: (\d+) succeeded, (\d+) failed", svg)
    assert len(tooltips) == 60  # one per minute of the hour
    assert [sum(int(t[i]) for t in tooltips) for i in (0, 1)] == [4, 1]
    assert "5 finished, 1 failed in the hour" in text


def test_nothing_is_loaded_from_another_site(root, busy_queue):
    text = root.get(URL).content.decode()
    sources = re.findall(r'(?:src|href)="([^"#?][^"]*)"', text)
    assert sources and all(not re.match(r"(https?:)?//", url) for url in sources)
    assert "/static/django_taskrunner/admin.css" in sources
    assert "<script src=\"http" not in text


def test_the_stylesheet_ships_with_the_app():
    from django.contrib.staticfiles import finders

    assert finders.find("django_taskrunner/admin.css")


def test_the_failures_link_to_the_failed_tasks_of_the_last_hour(root, busy_queue):
    text = root.get(URL).content.decode()
    link = re.search(r'<a href="(/admin/django_taskrunner/failedtask/\?[^"]+)" class="tr-bad">1'
                     r"</a>", text)
    assert link, "the failed count links to the failed-task list"
    listing = root.get(link.group(1).replace("&amp;", "&"))
    assert listing.status_code == 200
    assert "tests.testapp.tasks.always_fails" in listing.content.decode()


def test_no_leader_is_said_plainly(root):
    text = root.get(URL).content.decode()
    assert "No leader" in text


def test_one_queue_only(root, busy_queue):
    text = root.get(URL, {"queue": "other"}).content.decode()
    assert 'id="queue-other"' in text and 'id="queue-default"' not in text


def test_task_and_consumer_names_are_escaped(root, r, prefix):
    r.hset(keys.stats_key(prefix, "default"), "task:<script>alert(1)</script>:runs", 1)
    broker = get_store().streams
    broker.ensure_group("default")
    broker.add("default", "{}")
    broker.read("default", "<img src=x onerror=alert(2)>", 1, None)

    text = root.get(URL).content.decode()

    assert "<script>alert(1)" not in text and "<img src=x" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "&lt;img src=x onerror=alert(2)&gt;" in text


def test_non_staff_are_sent_to_the_login_page():
    response = logged_in(make_user("visitor", staff=False)).get(URL)
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_staff_without_the_permission_get_403():
    assert logged_in(make_user("clerk")).get(URL).status_code == 403


def test_the_view_permission_opens_it_without_failed_task_links(busy_queue):
    text = logged_in(make_user("viewer", "view_queue")).get(URL).content.decode()
    assert "web-1-ab12" in text
    assert "/failedtask/" not in text  # they may not open the failed tasks


def test_the_admin_index_links_the_dashboard(root):
    assert URL in root.get("/admin/").content.decode()
