"""The admin's "Delayed tasks" page: lists the Redis-held delayed set with pagination and
search, runs now and cancels after a confirmation, POST only, for permitted staff only,
with everything escaped."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from django_taskrunner.store import get_store, keys
from tests.django.admin_helpers import make_user
from tests.testapp.tasks import noop, stamp

pytestmark = pytest.mark.django_db

LIST_URL = "/admin/django_taskrunner/delayedtask/"
ACTION_URL = "/admin/django_taskrunner/delayedtask/action/"


@pytest.fixture
def admin_client_() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    return client


def delayed_len(r, queue: str = "default") -> int:
    return r.zcard(keys.delayed_key(get_store().prefix, queue))


def ref_of(message, r) -> str:
    score = r.zscore(keys.delayed_key(get_store().prefix, message.queue), message.to_json())
    return f"{int(score)}:{message.id}"


def test_the_urls_are_the_admin_ones():
    assert reverse("admin:django_taskrunner_delayedtask_changelist") == LIST_URL
    assert reverse("admin:django_taskrunner_delayedtask_action") == ACTION_URL


def test_the_page_lists_delayed_tasks_with_pagination(admin_client_, r):
    for n in range(120):
        noop.dispatch_delayed({"n": n}, delay=600 + n)
    stamp.dispatch_delayed({"n": "x"}, delay=60, queue="other")

    first = admin_client_.get(LIST_URL, {"queue": "default"})
    third = admin_client_.get(LIST_URL, {"queue": "default", "p": 3})

    assert first.status_code == 200
    text = first.content.decode()
    assert "Page 1 of 3" in text and "(120 waiting)" in text
    assert text.count('name="selected"') == 50
    assert "tests.testapp.tasks.noop" in text
    assert "other (1)" in text and "default (120)" in text
    assert third.content.decode().count('name="selected"') == 20
    assert "&quot;n&quot;: 119" in third.content.decode()  # the latest-due one, last


def test_search_by_task_name(admin_client_):
    noop.dispatch_delayed({"n": 1}, delay=600)
    stamp.dispatch_delayed({"n": 2}, delay=600)

    response = admin_client_.get(LIST_URL, {"queue": "default", "q": "STAMP"})

    text = response.content.decode()
    assert text.count('name="selected"') == 1
    assert "tests.testapp.tasks.stamp" in text


def test_run_now_asks_for_confirmation_then_moves_the_task_to_the_stream(admin_client_, r):
    message = noop.dispatch_delayed({"n": 1}, delay=600)
    other = noop.dispatch_delayed({"n": 2}, delay=600)
    data = {"action": "run", "queue": "default", "selected": [ref_of(message, r)]}

    confirm = admin_client_.post(ACTION_URL, data)
    assert confirm.status_code == 200
    assert "are you sure" in confirm.content.decode()
    assert delayed_len(r) == 2  # nothing done yet

    done = admin_client_.post(ACTION_URL, {**data, "confirm": "yes"})

    assert done.status_code == 302
    assert delayed_len(r) == 1
    ((_, fields),) = r.xrange(get_store().streams.stream("default"))
    assert message.id in fields[b"m"].decode()
    assert r.zscore(keys.delayed_key(get_store().prefix, "default"), other.to_json())


def test_cancel_removes_the_task_without_running_it(admin_client_, r):
    message = noop.dispatch_delayed({"n": 1}, delay=600)

    admin_client_.post(ACTION_URL, {"action": "cancel", "queue": "default", "confirm": "yes",
                                    "selected": [ref_of(message, r)]})

    assert delayed_len(r) == 0
    assert r.xlen(get_store().streams.stream("default")) == 0


@pytest.mark.parametrize("mode", ["until_finished", "while_locked"])
def test_cancel_frees_the_unique_lock_of_the_cancelled_task(admin_client_, r, mode):
    from django_taskrunner import TaskAlreadyDispatched
    from tests.testapp.tasks import unique_order

    message = unique_order.dispatch_delayed({"order": "c-1"}, delay=600, unique_mode=mode)
    with pytest.raises(TaskAlreadyDispatched):
        unique_order.dispatch({"order": "c-1"})

    admin_client_.post(ACTION_URL, {"action": "cancel", "queue": "default", "confirm": "yes",
                                    "selected": [ref_of(message, r)]})

    assert not r.exists(message.lock_key)
    unique_order.dispatch({"order": "c-1"})  # accepted again


def test_an_action_on_a_task_already_gone_does_nothing(admin_client_, r):
    message = noop.dispatch_delayed({"n": 1}, delay=600)
    ref = ref_of(message, r)
    r.delete(keys.delayed_key(get_store().prefix, "default"))

    response = admin_client_.post(ACTION_URL, {"action": "run", "queue": "default",
                                               "confirm": "yes", "selected": [ref]})

    assert response.status_code == 302
    assert r.xlen(get_store().streams.stream("default")) == 0


def test_actions_refuse_get(admin_client_, r):
    message = noop.dispatch_delayed({"n": 1}, delay=600)
    response = admin_client_.get(ACTION_URL, {"action": "cancel", "queue": "default",
                                              "confirm": "yes", "selected": ref_of(message, r)})
    assert response.status_code == 405
    assert delayed_len(r) == 1


def test_actions_need_the_csrf_token(r):
    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.create_superuser("root", password="pw"))
    message = noop.dispatch_delayed({"n": 1}, delay=600)

    response = client.post(ACTION_URL, {"action": "cancel", "queue": "default", "confirm": "yes",
                                        "selected": [ref_of(message, r)]})

    assert response.status_code == 403
    assert delayed_len(r) == 1


def test_non_staff_are_sent_to_the_login_page():
    client = Client()
    client.force_login(make_user("visitor", staff=False))
    assert client.get(LIST_URL).status_code == 302
    assert client.post(ACTION_URL, {"action": "run"}).status_code == 302


def test_staff_without_permissions_get_403(r):
    client = Client()
    client.force_login(make_user("clerk"))
    message = noop.dispatch_delayed({"n": 1}, delay=600)

    assert client.get(LIST_URL).status_code == 403
    response = client.post(ACTION_URL, {"action": "cancel", "queue": "default", "confirm": "yes",
                                        "selected": [ref_of(message, r)]})
    assert response.status_code == 403
    assert delayed_len(r) == 1


def test_view_permission_lists_but_cannot_run_or_cancel(r):
    client = Client()
    client.force_login(make_user("viewer", "view_delayedtask"))
    message = noop.dispatch_delayed({"n": 1}, delay=600)

    page = client.get(LIST_URL)
    assert page.status_code == 200
    assert 'name="selected"' not in page.content.decode()  # no action form for them
    for action in ("run", "cancel"):
        response = client.post(ACTION_URL, {"action": action, "queue": "default",
                                            "confirm": "yes", "selected": [ref_of(message, r)]})
        assert response.status_code == 403
    assert delayed_len(r) == 1


def test_cancel_permission_allows_cancel_only(r):
    client = Client()
    client.force_login(make_user("canceller", "view_delayedtask", "cancel_delayedtask"))
    message = noop.dispatch_delayed({"n": 1}, delay=600)
    data = {"queue": "default", "confirm": "yes", "selected": [ref_of(message, r)]}

    assert client.post(ACTION_URL, {**data, "action": "run"}).status_code == 403
    assert client.post(ACTION_URL, {**data, "action": "cancel"}).status_code == 302
    assert delayed_len(r) == 0


def test_payloads_and_names_are_escaped(admin_client_, r):
    message = noop.dispatch_delayed({"n": "<script>alert(1)</script>"}, delay=600)

    page = admin_client_.get(LIST_URL, {"q": "<script>"}).content.decode()
    listing = admin_client_.get(LIST_URL).content.decode()
    confirm = admin_client_.post(ACTION_URL, {"action": "run", "queue": "default",
                                              "selected": [ref_of(message, r)]}).content.decode()

    for text in (page, listing, confirm):
        assert "<script>alert" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in listing


def test_a_bad_queue_or_action_is_a_400(admin_client_):
    assert admin_client_.post(ACTION_URL, {"action": "explode"}).status_code == 400
    assert admin_client_.post(ACTION_URL, {"action": "run", "queue": "a:{b}"}).status_code == 400


def test_the_admin_index_links_the_page(admin_client_):
    text = admin_client_.get("/admin/").content.decode()
    assert LIST_URL in text
    assert "/admin/django_taskrunner/periodictask/" in text


def test_the_periodic_task_admin_validates_with_clean(admin_client_):
    response = admin_client_.post("/admin/django_taskrunner/periodictask/add/", {
        "name": "bad", "task_name": "tests.testapp.tasks.noop", "cron": "99 * * * *",
        "payload": "null", "queue": "", "enabled": "on",
    })
    assert response.status_code == 200
    assert "bad cron expression" in response.content.decode()

    response = admin_client_.post("/admin/django_taskrunner/periodictask/add/", {
        "name": "good", "task_name": "tests.testapp.tasks.noop", "cron": "*/5 * * * *",
        "payload": '{"a": 1}', "queue": "", "enabled": "on",
    })
    assert response.status_code == 302


def add_delayed_raw(r, body: bytes, score: float) -> None:
    r.zadd(keys.delayed_key(get_store().prefix, "default"), {body: score})


MALFORMED_DELAYED = [
    b'{"v": 1, "id": "over", "task": "tests.testapp.tasks.noop", "attempt": 1e400}',
    b'{"v": 1, "id": "deep", "task": "t", "payload": ' + b"[" * 988 + b"]" * 988 + b"}",
    b'{"v": 1, "id": "lock", "task": "tests.testapp.tasks.noop", "lock": 5}',
    b'{"v": 1, "id": "sur", "task": "tests.testapp.tasks.noop", "payload": "\\udcff"}',
]


def test_the_page_shows_entries_that_cannot_be_decoded_instead_of_failing(admin_client_, r):
    # Before: an OverflowError or RecursionError answered 500 for the whole page
    noop.dispatch_delayed({"n": "good"}, delay=600)
    for n, body in enumerate(MALFORMED_DELAYED):
        add_delayed_raw(r, body, 1_900_000_000_000 + n)
    add_delayed_raw(r, b'{"v": 1, "id": "far", "task": "t"}', float("inf"))

    response = admin_client_.get(LIST_URL, {"queue": "default"})
    searched = admin_client_.get(LIST_URL, {"queue": "default", "q": "noop"})

    assert response.status_code == 200 and searched.status_code == 200
    text = response.content.decode()
    assert text.count('name="selected"') == 6
    assert text.count("<td>(undecodable message)</td>") == 4
    assert "&quot;n&quot;: &quot;good&quot;" in response.content.decode()


@pytest.mark.parametrize("action", ["run", "cancel"])
def test_an_action_on_an_entry_that_cannot_be_decoded_takes_it_without_failing(
    admin_client_, r, action
):
    # An entry valid enough for the script to find by id, but not a usable message: one
    # with an overflowing attempt, one whose lock names the stream (WRONGTYPE on release)
    stream = get_store().streams.stream("default")
    r.xadd(stream, {"other": "entry"})
    bodies = [MALFORMED_DELAYED[0],
              b'{"v": 1, "id": "wrongtype", "task": "tests.testapp.tasks.noop", '
              b'"lock": "%s", "mode": "until_finished"}' % stream.encode()]
    for n, body in enumerate(bodies):
        add_delayed_raw(r, body, 1_900_000_000_000 + n)

    response = admin_client_.post(ACTION_URL, {
        "action": action, "queue": "default", "confirm": "yes",
        "selected": ["1900000000000:over", "1900000000001:wrongtype"]})

    assert response.status_code == 302
    assert delayed_len(r) == 0
    assert r.type(stream) == b"stream"  # a lock naming it is never released
    assert r.xlen(stream) == (3 if action == "run" else 1)
