"""The task page's timeline: each attempt (its wait, run, worker and error) on one time
axis with durations, from the record; times with seconds, durations in ms below 1 s."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from django_taskrunner import dispatch, lookup
from tests.django.admin_helpers import logged_in
from tests.testapp.tasks import fails_twice, noop

pytestmark = pytest.mark.django_db(transaction=True)
DETAIL = "/admin/django_taskrunner/task/detail/"


@pytest.fixture
def root():
    return logged_in(User.objects.create_superuser("root", password="pw"))  # noqa: S106


def test_a_task_retried_twice_shows_three_attempts_with_errors_on_one_axis(root):
    task = dispatch(fails_twice, {"n": 7})
    call_command("runtasks", "--burst")
    record = lookup(task.id)
    assert record.status == "succeeded"
    assert [t.outcome for t in record.attempts] == ["retrying", "retrying", "succeeded"]
    assert all(t.worker and t.started_ms <= t.ended_ms for t in record.attempts)
    assert record.attempts[0].error == "RuntimeError: not yet"

    page = root.get(DETAIL, {"queue": "default", "id": task.id}).content.decode()
    assert "<h2>Timeline</h2>" in page
    assert page.count("tr-step-ran") == 3 and "RuntimeError: not yet" in page
    assert "attempt 3: ran, succeeded" in page
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}", page)  # seconds and ms
    assert re.search(r">\d+ ms<", page)  # a step under a second, in ms
    for left, width in re.findall(r"left: ([\d.]+)%; width: ([\d.]+)%", page):
        assert 0 <= float(left) <= 100 and float(left) + float(width) <= 100.01


def test_record_times_have_seconds_and_a_fast_task_is_not_0_0_s(root):
    task = dispatch(noop, {"n": 1})
    call_command("runtasks", "--burst")
    page = root.get(DETAIL, {"queue": "default", "id": task.id}).content.decode()
    started = re.search(r"<th scope=\"row\">Started</th><td>([^<]+)</td>", page).group(1)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", started)
    assert "0.0 s" not in page


def test_past_waits_on_a_rate_limit_are_kept_and_drawn_with_the_limit_and_their_slot(root):
    from tests.testapp.limit_tasks import LIMITS_QUEUE, five_a_second
    from tests.worker_helpers import wait_for, worker_thread

    tasks = five_a_second.dispatch_many({"n": n} for n in range(12))
    with worker_thread((LIMITS_QUEUE,)):
        wait_for(lambda: all(lookup(t.id).status == "succeeded" for t in tasks), timeout=60)
    records = [lookup(t.id) for t in tasks]

    waited = [r for r in records if r.limit_waits]
    assert waited, "12 starts at 5/s: some must wait"
    assert any(not r.limit_waits for r in records)  # the first ones did not wait
    for record in waited:  # refused again and again, still one wait, ended by its start
        (wait,) = record.limit_waits
        assert wait.limit == "rate 5/s"
        assert wait.since_ms < wait.ended_ms
        assert wait.ended_ms == int(record.started_at.timestamp() * 1000)

    page = root.get(DETAIL, {"queue": LIMITS_QUEUE, "id": waited[-1].id}).content.decode()
    assert page.count("tr-step-limit") == 1
    assert "waited on limit rate 5/s" in page and "got its slot at" in page
