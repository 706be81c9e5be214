"""The admin for fair queues (docs/admin.md): the queues dashboard lists a fair queue's
keys with the most tasks waiting for their turn, each linked to the Tasks list filtered
by that key, which lists the key's waiting tasks; escaped, and for permitted staff only."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from django_taskrunner import dispatch_many
from django_taskrunner.store import get_store
from tests.django.admin_helpers import logged_in, make_user
from tests.testapp.tasks import noop

pytestmark = pytest.mark.django_db(transaction=True)

QUEUES = "/admin/django_taskrunner/queue/"
TASKS = "/admin/django_taskrunner/task/"


@pytest.fixture
def root() -> Client:
    return logged_in(User.objects.create_superuser("root", password="pw"))  # noqa: S106


def fair_table(html: str) -> list[list[str]]:
    """The rows of the dashboard's fair keys table, as the text of their cells."""
    table = re.search(r'<table class="tr-fair-keys">(.*?)</table>', html, re.S)
    assert table, "no fair keys table"
    return [[re.sub(r"<[^>]+>", "", cell).strip()
             for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", table.group(1), re.S)[1:]]


def test_the_dashboard_lists_a_fair_queues_busiest_keys(root):
    dispatch_many(noop, [{"n": n} for n in range(5)], fair_key="acct-big")
    dispatch_many(noop, [{"n": n} for n in range(2)], fair_key="<b>acct</b>")
    dispatch_many(noop, [{"n": n} for n in range(3)])  # the unkeyed turn

    html = root.get(QUEUES).content.decode()

    assert fair_table(html) == [["acct-big", "default", "5"], ["(no key)", "default", "3"],
                                ["&lt;b&gt;acct&lt;/b&gt;", "default", "2"]]
    assert f'href="{TASKS}?queue=default&amp;fair_key=acct-big"' in html
    assert "<b>acct</b>" not in html


def test_a_queue_without_fair_keys_shows_no_fair_table(root):
    noop.dispatch({"n": 1})

    assert 'class="tr-fair-keys"' not in root.get(QUEUES).content.decode()


def test_the_tasks_list_filters_by_fair_key(root):
    wanted = dispatch_many(noop, [{"n": n} for n in range(3)], fair_key="acct-1")
    other = dispatch_many(noop, [{"n": n} for n in range(2)], fair_key="acct-2")

    html = root.get(TASKS, {"queue": "default", "status": "queued",
                            "fair_key": "acct-1"}).content.decode()

    assert all(message.id in html for message in wanted)
    assert not any(message.id in html for message in other)
    assert "fair key acct-1, waiting for its turn" in html
    assert f"id={wanted[0].id}" in html  # its page, by id: no stream entry yet


def test_the_fair_key_filter_pages_through_a_long_list(root):
    sent = dispatch_many(noop, [{"n": n} for n in range(60)], fair_key="acct-1")

    first = root.get(TASKS, {"queue": "default", "fair_key": "acct-1", "status": "queued"})
    second = root.get(TASKS, {"queue": "default", "fair_key": "acct-1", "status": "queued",
                              "after": "50"})

    assert sent[0].id in first.content.decode() and sent[59].id not in first.content.decode()
    assert 'after=50' in first.content.decode()
    assert sent[59].id in second.content.decode() and sent[0].id not in second.content.decode()


def test_a_staff_user_without_the_task_permission_sees_keys_without_links():
    viewer = logged_in(make_user("viewer", "view_queue"))
    dispatch_many(noop, [{"n": n} for n in range(2)], fair_key="acct-1")

    html = viewer.get(QUEUES).content.decode()

    assert fair_table(html) == [["acct-1", "default", "2"]]
    assert "fair_key=" not in html


def test_fair_keys_of_the_wrong_type_leave_both_pages_working(root):
    dispatch_many(noop, [{"n": n} for n in range(2)], fair_key="acct-1")
    broker = get_store().streams
    broker.client.set(f"{broker.prefix}:{{default}}:fair:acct-1", "not a list")

    assert root.get(QUEUES).status_code == 200
    assert root.get(TASKS, {"queue": "default", "fair_key": "acct-1"}).status_code == 200
    broker.client.set(f"{broker.prefix}:{{default}}:fair-ring", "not a list")
    html = root.get(QUEUES).content.decode()
    assert 'class="tr-fair-keys"' not in html and "default" in html
