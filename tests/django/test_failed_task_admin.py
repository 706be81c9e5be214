"""The FailedTask admin: read-only rows, filters, and the retry action."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.utils import timezone

from django_taskrunner import TaskMessage
from django_taskrunner.models import FailedTask
from django_taskrunner.store import get_store

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/django_taskrunner/failedtask/"


def make_row(n: int, task_name: str = "tests.testapp.tasks.noop", payload=None) -> FailedTask:
    return FailedTask.objects.create(
        task_name=task_name, queue="default", message_id=f"m{n}",
        payload=json.dumps(payload if payload is not None else {"n": n}),
        error_class="ValueError", error="ValueError: boom", traceback="Traceback ...",
        attempts=3, worker="w1", failed_at=timezone.now(),
    )


@pytest.fixture
def staff_client(client):
    user = User.objects.create_user("ops", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=[
        "view_failedtask", "delete_failedtask"]))
    client.force_login(user)
    return client


def test_the_changelist_shows_rows_and_escapes_payloads(staff_client):
    row = make_row(1, payload={"html": "<script>alert(1)</script>"})
    page = staff_client.get(CHANGELIST)
    assert page.status_code == 200
    assert b"tests.testapp.tasks.noop" in page.content
    detail = staff_client.get(f"{CHANGELIST}{row.pk}/change/")
    assert detail.status_code == 200
    assert b"<script>alert(1)</script>" not in detail.content
    assert b"&lt;script&gt;" in detail.content


def queued_payloads() -> list:
    broker = get_store().streams
    return [TaskMessage.from_json(f[b"m"]).payload for _i, f in
            broker.client.xrange(broker.stream("default"))]


def test_retry_selected_asks_for_confirmation_first(staff_client):
    rows = [make_row(n) for n in range(2)]
    response = staff_client.post(CHANGELIST, {
        "action": "retry_selected", "_selected_action": [r.pk for r in rows],
    })
    assert response.status_code == 200
    assert b"Retry 2 failed tasks?" in response.content
    assert queued_payloads() == []
    assert FailedTask.objects.count() == 2


def test_retry_selected_dispatches_again_and_deletes_the_rows(staff_client):
    rows = [make_row(n) for n in range(3)]
    response = staff_client.post(CHANGELIST, {
        "action": "retry_selected", "_selected_action": [r.pk for r in rows[:2]],
        "confirm": "yes",
    })
    assert response.status_code == 302
    broker = get_store().streams
    queued = [TaskMessage.from_json(f[b"m"]) for _i, f in
              broker.client.xrange(broker.stream("default"))]
    assert sorted(m.payload["n"] for m in queued) == [0, 1]
    assert all(m.attempt == 1 for m in queued)
    assert list(FailedTask.objects.values_list("message_id", flat=True)) == ["m2"]


def test_retry_keeps_rows_it_cannot_dispatch(staff_client):
    row = make_row(1, task_name="gone.task")
    staff_client.post(CHANGELIST, {"action": "retry_selected", "_selected_action": [row.pk],
                                   "confirm": "yes"})
    assert FailedTask.objects.filter(pk=row.pk).exists()


def test_retry_one_row_from_its_page(staff_client):
    row = make_row(5)
    url = f"{CHANGELIST}{row.pk}/retry/"
    assert b"Retry 1 failed task?" in staff_client.get(url).content  # GET only asks
    assert FailedTask.objects.filter(pk=row.pk).exists()
    staff_client.post(url, {"confirm": "yes"})
    assert not FailedTask.objects.filter(pk=row.pk).exists()
    assert queued_payloads() == [{"n": 5}]


def test_retry_all_matching_the_current_filter(staff_client):
    for n in range(5):
        make_row(n)
    other = make_row(99, task_name="tests.testapp.tasks.on_other_queue")
    url = f"{CHANGELIST}retry-matching/?task_name=tests.testapp.tasks.noop"
    page = staff_client.get(url)
    assert b"Retry 5 failed tasks?" in page.content
    staff_client.post(url, {"confirm": "yes"})
    assert sorted(p["n"] for p in queued_payloads()) == [0, 1, 2, 3, 4]
    assert list(FailedTask.objects.values_list("pk", flat=True)) == [other.pk]


def test_retry_actions_need_the_delete_permission(client):
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_failedtask"))
    client.force_login(user)
    row = make_row(1)
    assert client.get(CHANGELIST).status_code == 200
    assert client.post(f"{CHANGELIST}{row.pk}/retry/", {"confirm": "yes"}).status_code == 403
    assert client.post(f"{CHANGELIST}retry-matching/", {"confirm": "yes"}).status_code == 403
    assert FailedTask.objects.filter(pk=row.pk).exists()


def test_confirmation_posts_need_the_csrf_token(django_user_model):
    from django.test import Client

    user = django_user_model.objects.create_superuser("root", password="pw")
    csrf_client = Client(enforce_csrf_checks=True)
    csrf_client.force_login(user)
    row = make_row(1)
    response = csrf_client.post(f"{CHANGELIST}{row.pk}/retry/", {"confirm": "yes"})
    assert response.status_code == 403
    assert FailedTask.objects.filter(pk=row.pk).exists()


def test_rows_cannot_be_added_or_changed(staff_client):
    row = make_row(1)
    assert staff_client.get(f"{CHANGELIST}add/").status_code == 403
    response = staff_client.post(f"{CHANGELIST}{row.pk}/change/", {"task_name": "x"})
    assert response.status_code == 403 or FailedTask.objects.get(pk=row.pk).task_name != "x"


def test_non_staff_users_are_sent_to_the_login_page(client):
    User.objects.create_user("joe", password="pw")
    client.login(username="joe", password="pw")
    response = client.get(CHANGELIST)
    assert response.status_code == 302
    assert "/login/" in response["Location"]


def test_the_list_shows_the_error_class_and_its_message_escaped(staff_client):
    row = make_row(1)
    FailedTask.objects.filter(pk=row.pk).update(
        error_class="shop.errors.MailRefused",
        error="MailRefused: <script>alert('x')</script> said the server")

    text = staff_client.get(CHANGELIST).content.decode()

    assert "shop.errors.MailRefused" in text
    assert "<td class=\"field-short_error\">&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; " \
           "said the server</td>" in text
    assert "<script>alert" not in text


def test_filters_by_task_queue_error_class_and_date(staff_client):
    make_row(1)
    other = make_row(2, task_name="tests.testapp.tasks.on_other_queue")
    FailedTask.objects.filter(pk=other.pk).update(queue="other", error_class="KeyError",
                                                  failed_at=timezone.now() - timedelta(days=30))

    def shown(**query) -> int:
        return staff_client.get(CHANGELIST, query).content.decode().count(
            'name="_selected_action"')

    assert shown() == 2
    assert shown(task_name="tests.testapp.tasks.on_other_queue") == 1
    assert shown(queue="default") == 1
    assert shown(error_class="KeyError") == 1
    since = (timezone.now() - timedelta(days=7)).isoformat()
    assert shown(failed_at__gte=since) == 1


def test_search_looks_in_payload_and_error(staff_client):
    make_row(1, payload={"customer": "ada@example.com"})
    make_row(2)
    FailedTask.objects.filter(message_id="m2").update(error="ValueError: quota exceeded")

    def shown(q: str) -> int:
        return staff_client.get(CHANGELIST, {"q": q}).content.decode().count(
            'name="_selected_action"')

    assert (shown("ada@example"), shown("quota"), shown("nothing-like-this")) == (1, 1, 0)


@pytest.mark.parametrize("query", ["confirm=yes", "next=/admin/", "failed_at__gte=not-a-date",
                                   "queue=default&confirm=yes"])
def test_retry_matching_with_a_parameter_that_is_not_a_filter_retries_nothing(
    staff_client, query
):
    make_row(1)
    url = f"{CHANGELIST}retry-matching/?{query}"
    for response in (staff_client.get(url, follow=True),
                     staff_client.post(url, {"confirm": "yes"}, follow=True)):
        assert response.status_code == 200
        assert response.redirect_chain == [(CHANGELIST, 302)]
        [message] = [str(m) for m in response.context["messages"]]
        assert message.startswith("Nothing was retried: the address has a parameter")
    assert FailedTask.objects.count() == 1
    assert queued_payloads() == []
