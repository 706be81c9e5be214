"""The admin's "Unique locks" page: every held lock found with SCAN and paged by cursor,
its queue, task, key, holder, mode and time left; a value-guarded "Release" that asks
first, POST only, CSRF-checked, for permitted staff only; everything escaped."""

from __future__ import annotations

import json
import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from django_taskrunner import TaskAlreadyDispatched
from django_taskrunner.models import UniqueLock
from django_taskrunner.store import get_store, keys
from tests.django.admin_helpers import logged_in, make_user, page_of
from tests.internals import holder_value
from tests.testapp.tasks import unique_order, unique_whole

pytestmark = pytest.mark.django_db

LIST_URL = "/admin/django_taskrunner/uniquelock/"
RELEASE_URL = "/admin/django_taskrunner/uniquelock/release/"


@pytest.fixture
def root() -> Client:
    return logged_in(User.objects.create_superuser("root", password="pw"))


def ref(message) -> str:
    return json.dumps([message.lock_key, holder_value(message)])


def shown_keys(html: str) -> list[str]:
    return [json.loads(value.replace("&quot;", '"'))[0] for value in
            re.findall(r'name="selected" value="([^"]*)"', html)]


def test_the_urls_are_the_admin_ones():
    assert reverse("admin:django_taskrunner_uniquelock_changelist") == LIST_URL
    assert reverse("admin:django_taskrunner_uniquelock_release") == RELEASE_URL


def test_the_page_shows_each_lock_with_its_task_key_holder_mode_and_time_left(root):
    order = unique_order.dispatch({"order": "A-1"}, unique_mode="until_executing",
                                  unique_for=3600)
    whole = unique_whole.dispatch({}, queue="other")

    text = root.get(LIST_URL).content.decode()

    assert "tests.testapp.tasks.unique_order" in text and "A-1" in text
    assert order.id in text and whole.id in text
    assert "until_executing" in text
    assert "(whole task)" in text  # unique_whole has no key
    assert re.search(r"<td>(59 min \d\d s|1 h 00 min)</td>", text)  # an hour, give or take
    assert "2 locks on this page" in text and "(the last page)" in text


def test_a_lock_without_a_mode_record_shows_the_declared_mode(root, r):
    message = unique_order.dispatch({"order": "old"})
    r.delete(keys.unique_mode_key(get_store().prefix, "default", message.lock_key))

    text = root.get(LIST_URL).content.decode()

    assert "until_finished (declared)" in text


def test_filter_by_queue_and_by_text(root):
    unique_order.dispatch({"order": "keep-me"})
    unique_order.dispatch({"order": "other-one"})
    unique_whole.dispatch({}, queue="other")

    by_queue = root.get(LIST_URL, {"queue": "other"}).content.decode()
    by_text = root.get(LIST_URL, {"q": "keep-"}).content.decode()

    assert len(shown_keys(by_queue)) == 1 and "unique_whole" in shown_keys(by_queue)[0]
    assert [key.rsplit(":", 1)[1] for key in shown_keys(by_text)] == ["keep-me"]


def test_pages_follow_the_scan_cursor_and_show_every_lock_once(root, r, monkeypatch):
    prefix = get_store().prefix
    pipe = r.pipeline(transaction=False)
    for n in range(250):
        pipe.set(keys.unique_key(prefix, "default", "tests.testapp.tasks.unique_order", f"k{n}"),
                 f"holder-{n}", px=600_000)
    pipe.execute()
    monkeypatch.setattr(page_of(UniqueLock), "scan_count", 37)  # batches that straddle pages

    seen: list[str] = []
    query: dict[str, str] = {}
    for _page in range(10):
        text = root.get(LIST_URL, query).content.decode()
        seen += shown_keys(text)
        found = re.search(r'href="\?([^"]*)" class="next-page"', text)
        if found is None:
            break
        query = dict(pair.split("=", 1) for pair in found.group(1).replace("&amp;", "&")
                     .split("&"))
    assert len(seen) == 250 == len(set(seen))
    assert _page == 2  # three pages of at most 100


def test_release_asks_first_then_frees_the_lock(root, r):
    message = unique_order.dispatch({"order": "R-1"})
    other = unique_order.dispatch({"order": "R-2"})

    confirm = root.post(RELEASE_URL, {"selected": [ref(message)]})
    assert confirm.status_code == 200
    assert "are you sure" in confirm.content.decode()
    assert r.exists(message.lock_key)

    done = root.post(RELEASE_URL, {"selected": [ref(message)], "confirm": "yes"})

    assert done.status_code == 302
    assert not r.exists(message.lock_key)
    assert r.exists(other.lock_key)
    unique_order.dispatch({"order": "R-1"})  # accepted again
    with pytest.raises(TaskAlreadyDispatched):
        unique_order.dispatch({"order": "R-2"})


def test_release_never_frees_a_lock_a_newer_task_took(root, r):
    old = unique_order.dispatch({"order": "N-1"})
    page_ref = ref(old)  # what the operator saw
    r.delete(old.lock_key)  # the TTL ran out...
    new = unique_order.dispatch({"order": "N-1"})  # ...and a newer task took the lock

    confirm = root.post(RELEASE_URL, {"selected": [page_ref]}).content.decode()
    response = root.post(RELEASE_URL, {"selected": [page_ref], "confirm": "yes"}, follow=True)

    assert "now held by another task" in confirm
    assert r.get(new.lock_key) == holder_value(new).encode()
    assert "a newer task holds them now" in response.content.decode()


def test_release_keeps_the_filters_when_it_goes_back(root):
    message = unique_order.dispatch({"order": "F-1"})
    response = root.post(RELEASE_URL, {"selected": [ref(message)], "confirm": "yes",
                                       "back": "queue=default&q=F-\r\nX: y&evil=1"})
    assert response["Location"] == f"{LIST_URL}?queue=default&q=F-%0D%0AX%3A+y"


def test_release_refuses_get(root, r):
    message = unique_order.dispatch({"order": "G-1"})
    response = root.get(RELEASE_URL, {"selected": [ref(message)], "confirm": "yes"})
    assert response.status_code == 405
    assert r.exists(message.lock_key)


def test_release_needs_the_csrf_token(r):
    client = logged_in(User.objects.create_superuser("root", password="pw"),
                       enforce_csrf_checks=True)
    message = unique_order.dispatch({"order": "C-1"})
    response = client.post(RELEASE_URL, {"selected": [ref(message)], "confirm": "yes"})
    assert response.status_code == 403
    assert r.exists(message.lock_key)


def test_release_refuses_keys_that_are_not_locks_and_malformed_refs(root, r):
    prefix = get_store().prefix
    stream = keys.stream_key(prefix, "default")
    r.set(f"{prefix}:{{default}}:id:x", "holder")
    for bad in (json.dumps([stream, "holder"]), json.dumps([f"{prefix}:{{default}}:id:x",
                                                             "holder"]), "not json", "[1, 2]"):
        response = root.post(RELEASE_URL, {"selected": [bad], "confirm": "yes"})
        assert response.status_code == 400, bad
    assert r.exists(f"{prefix}:{{default}}:id:x")


def test_non_staff_are_sent_to_the_login_page(r):
    client = logged_in(make_user("visitor", staff=False))
    message = unique_order.dispatch({"order": "S-1"})
    for response in (client.get(LIST_URL),
                     client.post(RELEASE_URL, {"selected": [ref(message)], "confirm": "yes"})):
        assert response.status_code == 302
        assert "/admin/login/" in response["Location"]
    assert r.exists(message.lock_key)


def test_staff_without_permissions_get_403(r):
    client = logged_in(make_user("clerk"))
    message = unique_order.dispatch({"order": "P-1"})
    assert client.get(LIST_URL).status_code == 403
    response = client.post(RELEASE_URL, {"selected": [ref(message)], "confirm": "yes"})
    assert response.status_code == 403
    assert r.exists(message.lock_key)


def test_the_view_permission_lists_but_cannot_release(r):
    client = logged_in(make_user("viewer", "view_uniquelock"))
    message = unique_order.dispatch({"order": "V-1"})

    page = client.get(LIST_URL).content.decode()
    response = client.post(RELEASE_URL, {"selected": [ref(message)], "confirm": "yes"})

    assert "V-1" in page and 'name="selected"' not in page
    assert response.status_code == 403
    assert r.exists(message.lock_key)


def test_the_release_permission_releases(r):
    client = logged_in(make_user("ops", "view_uniquelock", "release_uniquelock"))
    message = unique_order.dispatch({"order": "O-1"})
    client.post(RELEASE_URL, {"selected": [ref(message)], "confirm": "yes"})
    assert not r.exists(message.lock_key)


def test_keys_and_holders_are_shown_escaped(root):
    message = unique_order.dispatch({"order": "<script>alert(1)</script>"})

    listing = root.get(LIST_URL).content.decode()
    confirm = root.post(RELEASE_URL, {"selected": [ref(message)]}).content.decode()
    searched = root.get(LIST_URL, {"q": "<script>"}).content.decode()

    for text in (listing, confirm, searched):
        assert "<script>alert" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in listing
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in searched


def test_the_admin_index_links_the_page(root):
    assert LIST_URL in root.get("/admin/").content.decode()


def test_each_lock_shows_its_holders_conflict_policy(root, r):
    replaced = unique_order.dispatch({"order": "P-1"}, on_conflict="replace")
    raised = unique_order.dispatch({"order": "P-2"})
    older = unique_order.dispatch({"order": "P-3"})
    r.set(keys.unique_mode_key(get_store().prefix, "default", older.lock_key), "until_finished")

    text = root.get(LIST_URL).content.decode()

    assert replaced.id in text and raised.id in text
    assert "<td>replace</td>" in text and "<td>raise</td>" in text
    assert "raise (declared)" in text  # a record of the mode alone: the task's policy
