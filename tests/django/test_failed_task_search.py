"""The FailedTask admin at scale: its filters list each column's values through the
index, the same values in the same order as SELECT DISTINCT; the search finds what
Django's icontains search finds (on PostgreSQL through migration 0010's indexes)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone

from django_taskrunner.models import FailedTask
from tests.django.admin_helpers import page_module

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/django_taskrunner/failedtask/"
NAMES = ["shop.tasks.b", "shop.tasks.a", "Shop.tasks.C", "shop.tasks.a", "émile.tasks.x", ""]


@pytest.fixture
def rows():
    now = timezone.now()
    FailedTask.objects.bulk_create([
        FailedTask(task_name=name, queue=("default", "mail")[n % 2], message_id=f"msg-{n}",
                   payload=f'{{"email": "customer-{n}@example.com"}}',
                   error_class=f"shop.errors.Error{n % 3}", error=f"Error{n % 3}: order {n}",
                   failed_at=now)
        for n, name in enumerate(NAMES)])


@pytest.fixture
def staff_client(client):
    client.force_login(User.objects.create_superuser("root", password="pw"))  # noqa: S106
    return client


@pytest.mark.parametrize("column", ["task_name", "queue", "error_class"])
def test_filter_values_are_select_distinct(rows, column):
    expected = list(FailedTask.objects.order_by(column).values_list(column, flat=True)
                    .distinct())
    assert page_module(FailedTask).distinct_values(column) == expected


def test_filter_values_of_an_empty_table():
    assert page_module(FailedTask).distinct_values("task_name") == []


def test_the_changelist_lists_each_value_once_and_filters_by_it(rows, staff_client):
    page = staff_client.get(CHANGELIST).content.decode()
    assert page.count("?task_name=shop.tasks.a") == 1
    filtered = staff_client.get(CHANGELIST, {"task_name": "shop.tasks.a"})
    assert {row.message_id for row in filtered.context["cl"].result_list} == {"msg-1", "msg-3"}


@pytest.mark.parametrize("term, found", [
    ("msg-4", {"msg-4"}), ("CUSTOMER-2@", {"msg-2"}), ("order 5", {"msg-5"}),
    ("Error1", {"msg-1", "msg-4"}), ("émile", {"msg-4"}),
])
def test_search_finds_what_icontains_finds(rows, staff_client, term, found):
    response = staff_client.get(CHANGELIST, {"q": term})
    assert response.status_code == 200
    shown = {row.message_id for row in response.context["cl"].result_list}
    assert shown == found


@pytest.mark.skipif(connection.vendor != "postgresql", reason="trigram indexes: PostgreSQL only")
def test_postgresql_has_the_search_indexes():
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = %s",
                       [FailedTask._meta.db_table])
        names = {row[0] for row in cursor.fetchall()}
    assert {f"taskrunner_failed_{c}_trgm" for c in
            ("payload", "error", "task_name", "message_id")} <= names
