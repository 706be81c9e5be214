"""The failed-task list counts at most `count_cap` rows past its page: it shows "N+",
still pages to the last row, and filters and search find the same rows as before (on
SQLite, and on PostgreSQL when TASKRUNNER_TEST_DATABASE_URL is set)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_taskrunner.models import FailedTask
from tests.django.admin_helpers import page_module

pytestmark = pytest.mark.django_db

failed_page = page_module(FailedTask)  # the failed-task list's page

CHANGELIST = "/admin/django_taskrunner/failedtask/"
ROWS = 1_000
CAP = 250


def add_rows(count: int) -> None:
    """`count` rows, row n failed n seconds ago: the list shows m0, m1, ... in order."""
    now = timezone.now()
    FailedTask.objects.bulk_create([
        FailedTask(task_name=f"shop.tasks.t{n % 4}", queue=("default", "mail")[n % 2],
                   message_id=f"m{n}", payload=f'{{"email": "c{n}@example.com"}}',
                   error_class=f"shop.errors.E{n % 5}", error=f"E{n % 5}: row {n}",
                   failed_at=now - timedelta(seconds=n))
        for n in range(count)], batch_size=2_000)


@pytest.fixture
def staff_client(client):
    user = User.objects.create_user("ops", password="pw", is_staff=True)  # noqa: S106
    user.user_permissions.add(*Permission.objects.filter(codename__in=[
        "view_failedtask", "delete_failedtask"]))
    client.force_login(user)
    return client


@pytest.fixture
def small_cap(monkeypatch):
    monkeypatch.setattr(admin.site._registry[FailedTask], "count_cap", CAP)


def shown(response) -> list[str]:
    assert response.status_code == 200
    return [row.message_id for row in response.context["cl"].result_list]


def failed_task_counts(queries) -> list[str]:
    return [q["sql"] for q in queries if "COUNT(" in q["sql"].upper()
            and "django_taskrunner_failedtask" in q["sql"]]


def test_at_least_is_an_int_shown_with_a_plus():
    count = failed_page.AtLeast(10_001)
    assert count == 10_001 and count > 10_000
    assert str(count) == "10,000+" and f"{count}" == "10,000+"


def test_a_long_list_shows_the_cap_with_a_plus_and_never_counts_every_row(staff_client):
    add_rows(failed_page.COUNT_CAP + 50)
    with CaptureQueriesContext(connection) as queries:
        response = staff_client.get(CHANGELIST)
    page = response.content.decode()
    assert "10,000+ failed tasks" in page
    assert "Select all 10,000+ failed tasks" in page
    assert shown(response) == [f"m{n}" for n in range(100)]
    counts = failed_task_counts(queries.captured_queries)
    assert len(counts) == 1 and "LIMIT 10001" in counts[0].upper()


def test_paging_past_the_cap_reaches_the_last_row(staff_client, small_cap):
    add_rows(ROWS)
    first = staff_client.get(CHANGELIST)
    assert "250+ failed tasks" in first.content.decode()
    assert f'href="?p={3}"' in first.content.decode()  # the pages the capped count covers
    assert f'href="?p={4}"' not in first.content.decode()

    third = staff_client.get(CHANGELIST, {"p": 3})
    assert shown(third) == [f"m{n}" for n in range(200, 300)]
    assert "450+ failed tasks" in third.content.decode()  # 250 past the page's start
    assert 'href="?p=5"' in third.content.decode()

    seventh = staff_client.get(CHANGELIST, {"p": 7})
    assert shown(seventh) == [f"m{n}" for n in range(600, 700)]

    last = staff_client.get(CHANGELIST, {"p": 10})
    assert shown(last) == [f"m{n}" for n in range(900, 1_000)]
    assert "1000 failed tasks" in last.content.decode()  # the last page: an exact count
    assert 'href="?p=11"' not in last.content.decode()

    beyond = staff_client.get(CHANGELIST, {"p": 11})
    assert beyond.status_code == 302 and beyond["Location"].endswith("?e=1")


def test_show_all_is_not_offered_for_a_count_that_is_only_a_lower_bound(staff_client,
                                                                         monkeypatch):
    monkeypatch.setattr(admin.site._registry[FailedTask], "count_cap", 120)
    add_rows(ROWS)  # "120+": under list_max_show_all (200), yet 1,000 rows
    first = staff_client.get(CHANGELIST)
    assert "120+ failed tasks" in first.content.decode()
    assert "showall" not in first.content.decode()
    every = staff_client.get(CHANGELIST, {"all": ""})
    assert shown(every) == [f"m{n}" for n in range(100)]


def test_a_list_that_fits_on_one_page_is_read_once_and_counted_exactly(staff_client):
    add_rows(40)
    with CaptureQueriesContext(connection) as queries:
        response = staff_client.get(CHANGELIST)
    assert shown(response) == [f"m{n}" for n in range(40)]
    assert "40 failed tasks" in response.content.decode()
    assert failed_task_counts(queries.captured_queries) == []
    rows_read = [q for q in queries.captured_queries
                 if q["sql"].startswith('SELECT "django_taskrunner_failedtask"."id"')]
    assert len(rows_read) == 1


def test_an_empty_list_says_zero(staff_client):
    response = staff_client.get(CHANGELIST)
    assert shown(response) == []
    assert "0 failed tasks" in response.content.decode()


def test_a_filter_pages_its_own_rows_past_the_cap(staff_client, small_cap):
    add_rows(ROWS)  # t1: rows 1, 5, 9, ... (250 of them)
    first = staff_client.get(CHANGELIST, {"task_name": "shop.tasks.t1"})
    assert shown(first) == [f"m{n}" for n in range(1, 400, 4)]
    assert "250 failed tasks" in first.content.decode()  # 250 rows: under the limit of 251

    both = {"error_class": "shop.errors.E3", "queue": "mail"}  # n % 10 == 3: 100 rows
    assert shown(staff_client.get(CHANGELIST, both)) == [f"m{n}" for n in range(3, 1_000, 10)]

    mail = staff_client.get(CHANGELIST, {"queue": "mail", "p": 2})  # 500 rows
    assert shown(mail) == [f"m{n}" for n in range(201, 400, 2)]
    assert "350+ failed tasks" in mail.content.decode()
    mail_last = staff_client.get(CHANGELIST, {"queue": "mail", "p": 5})
    assert shown(mail_last) == [f"m{n}" for n in range(801, 1_000, 2)]
    assert "500 failed tasks" in mail_last.content.decode()


@pytest.mark.parametrize("term, found", [
    ("m617", ["m617"]), ("C42@", ["m42"]),
    ('"row 99"', ["m99", *(f"m{n}" for n in range(990, 1_000))]),
])
def test_search_finds_its_rows_with_an_exact_count(staff_client, small_cap, term, found):
    add_rows(ROWS)
    response = staff_client.get(CHANGELIST, {"q": term})
    assert shown(response) == found
    assert f"{len(found)} result" in response.content.decode()


def test_a_search_matching_many_rows_is_capped_and_pages(staff_client, small_cap):
    add_rows(ROWS)  # "E2:" in rows n % 5 == 2: 200 rows, under the cap
    response = staff_client.get(CHANGELIST, {"q": "E2:"})
    assert shown(response) == [f"m{n}" for n in range(2, 500, 5)]
    assert "200 results" in response.content.decode()

    every = staff_client.get(CHANGELIST, {"q": "example.com"})  # every row
    assert shown(every) == [f"m{n}" for n in range(100)]
    assert "250+ results" in every.content.decode()
    last = staff_client.get(CHANGELIST, {"q": "example.com", "p": 10})
    assert shown(last) == [f"m{n}" for n in range(900, 1_000)]


def test_retry_all_matching_still_counts_every_matching_row(staff_client, small_cap):
    add_rows(ROWS)
    response = staff_client.get(f"{CHANGELIST}retry-matching/", {"queue": "mail"})
    assert response.status_code == 200
    assert "Retry 500 failed tasks?" in response.content.decode()


def test_the_list_order_indexes_exist():
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, FailedTask._meta.db_table)
    columns = {name: c["columns"] for name, c in constraints.items() if c["index"]}
    assert columns["taskrunner_failed_recent"] == ["failed_at", "id"]
    for name, first in [("taskrunner_failed_task_recent", "task_name"),
                        ("taskrunner_failed_queue_recent", "queue"),
                        ("taskrunner_failed_error_recent", "error_class")]:
        assert columns[name] == [first, "failed_at", "id"]


postgresql_only = pytest.mark.skipif(connection.vendor != "postgresql",
                                     reason="statement_timeout: PostgreSQL only")


def statement_timeout() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        return cursor.fetchone()[0]


def slow_rows():
    """Every row, each taking 50 ms to read: a count of a few of them outlasts 20 ms."""
    return FailedTask.objects.extra(where=["pg_sleep(0.05) IS NOT NULL"])


@postgresql_only
@pytest.mark.parametrize("in_atomic", [False, True])
def test_a_count_postgresql_cannot_finish_in_time_gives_up_and_leaves_no_timeout(in_atomic):
    add_rows(5)
    before = statement_timeout()
    if in_atomic:
        with transaction.atomic():
            assert failed_page.bounded_count(slow_rows(), 20) is None
            assert failed_page.bounded_count(FailedTask.objects.all(), 1_000) == 5
            assert statement_timeout() == before
    else:
        assert failed_page.bounded_count(slow_rows(), 20) is None
        assert failed_page.bounded_count(FailedTask.objects.all(), 1_000) == 5
    assert statement_timeout() == before
    assert FailedTask.objects.count() == 5  # the connection is still usable


@postgresql_only
def test_a_list_whose_count_times_out_still_pages_on():
    add_rows(10)
    rows = slow_rows().order_by("-failed_at", "-id")
    paginator = failed_page.CappedPaginator(rows, 2, page_number=2, cap=5, timeout_ms=20)
    assert paginator.count == failed_page.AtLeast(5) and str(paginator.count) == "4+"
    assert paginator.num_pages == 3  # the next page is a link away
    assert [row.message_id for row in paginator.page(2).object_list] == ["m2", "m3"]
