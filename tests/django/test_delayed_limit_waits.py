"""Delayed tasks: a task waiting on a rate or concurrency limit is shown as such, not
as one more scheduled task."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User

from django_taskrunner import lookup
from tests.django.admin_helpers import logged_in
from tests.testapp.limit_tasks import LIMITS_QUEUE, five_a_second
from tests.testapp.tasks import noop
from tests.worker_helpers import wait_for, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)
PAGE = "/admin/django_taskrunner/delayedtask/"


def test_limit_waits_and_scheduled_tasks_read_differently(r):
    root = logged_in(User.objects.create_superuser("root", password="pw"))  # noqa: S106
    noop.dispatch_delayed({"n": 1}, delay=timedelta(hours=1), queue=LIMITS_QUEUE)
    tasks = five_a_second.dispatch_many({"n": n} for n in range(30))
    with worker_thread((LIMITS_QUEUE,)):
        wait_for(lambda: any(lookup(task.id).status == "delayed" for task in tasks))
    # The worker stopped: the set holds still while the page counts it (ZCARD) and reads
    # its first page (ZRANGE). Read while tasks moved in, the count could be taken before
    # they came and the page cut short before the noop, due last.
    page = root.get(PAGE, {"queue": LIMITS_QUEUE}).content.decode()
    assert "waiting on limit rate 5/s" in page
    assert "scheduled" in page  # the noop due in an hour


def test_the_dashboard_and_the_tasks_page_count_limit_waits_the_same_way(r):
    import re

    from django_taskrunner.store import get_store, keys

    root = logged_in(User.objects.create_superuser("root", password="pw"))  # noqa: S106
    noop.dispatch_delayed({"n": 1}, delay=timedelta(hours=1), queue=LIMITS_QUEUE)
    tasks = five_a_second.dispatch_many({"n": n} for n in range(30))
    with worker_thread((LIMITS_QUEUE,)):
        wait_for(lambda: sum(lookup(task.id).status == "delayed" for task in tasks) >= 3)
    # The worker stopped: nothing moves now. The delayed set holds the noop (scheduled)
    # and the tasks refused by the rate limit.
    total = r.zcard(keys.delayed_key(get_store().prefix, LIMITS_QUEUE))
    assert total >= 4

    dashboard = root.get("/admin/django_taskrunner/queue/", {"queue": LIMITS_QUEUE})
    listing = root.get("/admin/django_taskrunner/task/", {"queue": LIMITS_QUEUE})

    html = dashboard.content.decode()
    shown = (re.search(r'data-field="delayed">(\d+)<', html).group(1),
             re.search(r'data-field="on-limit">(\d+)<', html).group(1))
    assert shown == ("1", str(total - 1))
    page = listing.content.decode()
    assert "delayed (1)" in page and f"waiting on a limit ({total - 1})" in page
