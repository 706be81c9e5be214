"""The admin pages stay paged with 10,000 failed rows, 10,000 delayed tasks and 10,000
unique locks: a page shows its slice, the last page is reachable, nothing loads it all."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from django_taskrunner import TaskMessage
from django_taskrunner.models import FailedTask, UniqueLock
from django_taskrunner.store import Store, get_store, keys
from tests.django.admin_helpers import page_module

pytestmark = pytest.mark.django_db

N = 10_000


@pytest.fixture
def root() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    return client


def test_ten_thousand_failed_rows_page_by_100(root, django_assert_max_num_queries):
    now = timezone.now()
    FailedTask.objects.bulk_create([
        FailedTask(task_name=f"shop.tasks.t{n % 3}", queue="default", message_id=f"m{n}",
                   payload=json.dumps({"n": n}), error_class="builtins.ValueError",
                   error=f"ValueError: row {n}", attempts=1,
                   failed_at=now - timedelta(seconds=n)) for n in range(N)
    ], batch_size=2000)
    url = "/admin/django_taskrunner/failedtask/"

    with django_assert_max_num_queries(12):
        first = root.get(url).content.decode()
    last = root.get(url, {"p": 100}).content.decode()
    filtered = root.get(url, {"task_name": "shop.tasks.t1", "p": 34}).content.decode()

    assert first.count('name="_selected_action"') == 100
    assert "row 0<" in first and "row 99<" in first and "row 100<" not in first
    assert last.count('name="_selected_action"') == 100 and "row 9999<" in last
    assert filtered.count('name="_selected_action"') == 33  # 3,333 rows: 33 full pages + 33
    assert "10000 failed tasks" in first


def test_ten_thousand_delayed_tasks_page_by_50(root, r):
    broker = get_store().streams
    key = keys.delayed_key(broker.prefix, "default")
    due = 4_000_000_000_000
    pipe = r.pipeline(transaction=False)
    for n in range(N):
        body = TaskMessage(id=f"d{n}", task_name="tests.testapp.tasks.noop", queue="default",
                           payload={"n": n}).to_json()
        pipe.zadd(key, {body: due + n})
    pipe.execute()
    url = "/admin/django_taskrunner/delayedtask/"

    first = root.get(url, {"queue": "default"}).content.decode()
    last = root.get(url, {"queue": "default", "p": 200}).content.decode()

    assert "Page 1 of 200 (10000 waiting)" in first
    assert first.count('name="selected"') == 50
    assert 'value="4000000000000:d0"' in first
    assert last.count('name="selected"') == 50
    assert 'value="4000000009999:d9999"' in last


def test_ten_thousand_locks_page_by_100_through_scan(root, r):
    prefix = get_store().prefix
    pipe = r.pipeline(transaction=False)
    for n in range(N):
        pipe.set(keys.unique_key(prefix, "default", "tests.testapp.tasks.unique_order",
                                 f"k{n}"), f"h{n}", px=600_000)
    pipe.execute()
    url = "/admin/django_taskrunner/uniquelock/"

    first = root.get(url).content.decode()
    assert first.count('name="selected"') == 100
    assert 'class="next-page"' in first

    seen, at = set(), None
    unique_locks = page_module(UniqueLock)
    while True:  # the same walk the "next page" links make
        page = unique_locks.scan_page(Store(r, prefix), at)
        assert len(page.locks) <= unique_locks.PAGE_SIZE
        seen.update(lock.key for lock in page.locks)
        if page.next is None:
            break
        at = page.next
    assert len(seen) == N
    next_link = re.search(r'href="\?([^"]*)" class="next-page"', first).group(1)
    second = root.get(f"{url}?{next_link.replace('&amp;', '&')}").content.decode()
    assert second.count('name="selected"') == 100
