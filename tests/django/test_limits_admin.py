"""The admin's "Limits" page: each rate and concurrency key in use, its use now, the
holders of its slots (linked to their task pages) and its waiting tasks; paged by SCAN
cursor, for staff with the view permission only, everything escaped."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from django_taskrunner.store import get_store, keys
from tests.django.admin_helpers import logged_in
from tests.testapp.limit_tasks import (
    LIMITS_QUEUE,
    once_an_hour,
    one_per_key,
    two_a_second_per_account,
)

pytestmark = pytest.mark.django_db

LIST_URL = "/admin/django_taskrunner/limit/"


def store():  # type: ignore[no-untyped-def]
    return get_store().limits


def key(kind: str, task, part: str = "") -> str:
    return keys.limit_key(get_store().prefix, LIMITS_QUEUE, kind, task.name, part)


def rows(html: str) -> list[str]:
    body = html.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return re.findall(r"<tr>(.*?)</tr>", body, re.S)


def test_the_url_is_the_admin_one():
    assert reverse("admin:django_taskrunner_limit_changelist") == LIST_URL


def test_only_staff_with_the_view_permission_see_it():
    anonymous = Client().get(LIST_URL)
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]
    user = User.objects.create_user("staff", is_staff=True)
    assert logged_in(user).get(LIST_URL).status_code == 403
    user.user_permissions.add(Permission.objects.get(
        codename="view_limit", content_type__app_label="django_taskrunner"))
    user = User.objects.get(pk=user.pk)
    assert logged_in(user).get(LIST_URL).status_code == 200


def test_it_shows_each_key_s_use_holders_and_waiting_tasks():
    limits = store()
    # Given a rate limit with its start of the hour taken and one task refused
    assert limits.take_rate(key("rate", once_an_hour), 1, 3_600_000, "r1").admitted
    assert not limits.take_rate(key("rate", once_an_hour), 1, 3_600_000, "r2").admitted
    # and a concurrency key held by one task, two more waiting
    slots = key("concurrency", one_per_key, "acct<1>")
    assert limits.take_slot(slots, 1, "holder-1", 60_000, 200, 5000).admitted
    for waiter in ("w1", "w2"):
        assert not limits.take_slot(slots, 1, waiter, 60_000, 200, 5000).admitted

    html = logged_in(User.objects.create_superuser("root")).get(
        LIST_URL).content.decode()

    (rate_row,) = [row for row in rows(html) if "once_an_hour" in row]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", rate_row, re.S)
    assert cells[1] == "rate" and cells[4] == "1/h" and cells[5].startswith("1 ")
    assert cells[-1] == "1"
    (slot_row,) = [row for row in rows(html) if "one_per_key" in row]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", slot_row, re.S)
    assert cells[3] == "acct&lt;1&gt;" and cells[4] == "1 at once"
    assert cells[5].startswith("1 ") and cells[-1] == "2"
    detail = reverse("admin:django_taskrunner_task_detail")
    assert f'href="{detail}?queue={LIMITS_QUEUE}&amp;id=holder-1"' in slot_row
    assert "<script" not in html.split("<tbody>", 1)[1]


def test_pages_follow_the_scan_cursor_and_show_every_key_once():
    limits = store()
    accounts = [f"a{n:03d}" for n in range(150)]
    for account in accounts:
        limits.take_rate(key("rate", two_a_second_per_account, account), 2, 1000, "t")
    root = logged_in(User.objects.create_superuser("root"))

    seen: list[str] = []
    url = LIST_URL
    for _ in range(10):
        html = root.get(url).content.decode()
        page = rows(html)
        assert len(page) <= 100
        seen += [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)[3] for row in page]
        found = re.search(r'href="\?(at=[^"]+)" class="next-page"', html)
        if not found:
            break
        url = f"{LIST_URL}?{found.group(1).replace('&amp;', '&')}"
    assert sorted(seen) == accounts


def test_nothing_in_use_says_so():
    html = logged_in(User.objects.create_superuser("root")).get(
        LIST_URL).content.decode()
    assert "No rate or concurrency limit is in use" in html
