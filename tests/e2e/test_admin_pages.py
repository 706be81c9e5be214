"""A person's path through the admin console, in a real browser."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone
from selenium.webdriver.common.by import By

from django_taskrunner import TaskMessage
from django_taskrunner.models import FailedTask
from django_taskrunner.store import get_store, keys
from tests.e2e.conftest import click_and_wait
from tests.internals import holder_value
from tests.worker_helpers import app_now_ms

pytestmark = pytest.mark.django_db(transaction=True)


def failed_row(n: int, payload: object) -> FailedTask:
    return FailedTask.objects.create(
        task_name="tests.testapp.tasks.noop", queue="default", message_id=f"e2e-{n}",
        payload=json.dumps(payload), error_class="ValueError",
        error=f"ValueError: the mail server said no ({n})",
        traceback="Traceback (most recent call last):\n  ...\nValueError: the mail server said no",
        attempts=3, worker="web-1-1234", failed_at=timezone.now(),
    )


def test_an_operator_retries_a_failed_task_from_its_page(admin_browser, screenshot_dir):
    row = failed_row(1, {"n": 1, "note": "<script>alert('x')</script>"})
    failed_row(2, {"n": 2})
    browser = admin_browser

    browser.get(f"{browser.base_url}/admin/django_taskrunner/failedtask/")
    assert "the mail server said no" in browser.page_source
    browser.save_screenshot(str(screenshot_dir / "admin-failed-tasks.png"))

    browser.get(f"{browser.base_url}/admin/django_taskrunner/failedtask/{row.pk}/change/")
    assert "&lt;script&gt;" in browser.page_source  # shown escaped, never run
    browser.save_screenshot(str(screenshot_dir / "admin-failed-task-detail.png"))
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "a.retry-one"))
    assert "Retry 1 failed task?" in browser.page_source
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "input[type=submit]"))

    assert "Dispatched 1 task(s) again" in browser.page_source
    assert not FailedTask.objects.filter(pk=row.pk).exists()
    broker = get_store().streams
    [(_id, fields)] = broker.client.xrange(broker.stream("default"))
    assert TaskMessage.from_json(fields[b"m"]).payload["n"] == 1


def test_the_admin_index_shows_the_task_runner_section(admin_browser, screenshot_dir):
    browser = admin_browser
    browser.get(f"{browser.base_url}/admin/")
    section = browser.find_element(By.CSS_SELECTOR, "div.app-django_taskrunner").text
    for name in ("Delayed tasks", "Failed tasks", "Periodic tasks", "Queues", "Unique locks"):
        assert name in section
    browser.save_screenshot(str(screenshot_dir / "admin-index.png"))


def test_an_operator_cancels_a_delayed_task(admin_browser, screenshot_dir):
    from selenium.webdriver.support.ui import Select

    from tests.testapp.tasks import noop, on_other_queue, stamp

    doomed = noop.dispatch_delayed({"order": 41, "note": "<script>alert(1)</script>"},
                                   delay=timedelta(minutes=5))
    kept = stamp.dispatch_delayed({"order": 42}, delay=timedelta(hours=2))
    noop.dispatch_delayed({"order": 43, "lines": [1, 2, 3]}, delay=timedelta(days=1))
    on_other_queue.dispatch_delayed({"report": "weekly"}, delay=timedelta(days=3))
    browser = admin_browser

    browser.get(f"{browser.base_url}/admin/django_taskrunner/delayedtask/?queue=default")
    assert "&lt;script&gt;" in browser.page_source and doomed.id in browser.page_source
    browser.save_screenshot(str(screenshot_dir / "admin-delayed-tasks.png"))
    row = browser.find_element(By.XPATH, f"//tr[td[text()='{doomed.id}']]")
    row.find_element(By.NAME, "selected").click()
    Select(browser.find_element(By.NAME, "action")).select_by_value("cancel")
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "div.actions button"))
    assert "are you sure" in browser.page_source
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "input[type=submit]"))

    assert "Cancelled: 1 delayed task(s)." in browser.page_source
    assert doomed.id not in browser.page_source and kept.id in browser.page_source
    broker = get_store().streams
    bodies = broker.client.zrange(keys.delayed_key(broker.prefix, "default"), 0, -1)
    waiting = [TaskMessage.from_json(body).id for body in bodies]
    assert len(waiting) == 2 and kept.id in waiting and doomed.id not in waiting


def test_an_operator_releases_a_unique_lock(admin_browser, screenshot_dir):
    from tests.testapp.tasks import unique_order, unique_whole

    stuck = unique_order.dispatch({"order": "A-1001"}, unique_mode="while_locked",
                                  unique_for=3600)
    other = unique_order.dispatch({"order": "A-1002"}, unique_mode="until_executed",
                                  unique_for=600)
    unique_order.dispatch({"order": "<script>alert(1)</script>"}, unique_for=90)
    unique_whole.dispatch({}, queue="other")
    browser = admin_browser

    browser.get(f"{browser.base_url}/admin/django_taskrunner/uniquelock/")
    assert "&lt;script&gt;" in browser.page_source
    assert "while_locked" in browser.page_source and stuck.id in browser.page_source
    browser.save_screenshot(str(screenshot_dir / "admin-unique-locks.png"))
    row = browser.find_element(By.XPATH, f"//tr[td[text()='{stuck.id}']]")
    row.find_element(By.NAME, "selected").click()
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "div.actions button"))
    assert "will be released" in browser.page_source
    browser.save_screenshot(str(screenshot_dir / "admin-unique-lock-release.png"))
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "input[type=submit]"))

    assert "Released 1 lock(s)." in browser.page_source
    broker = get_store().streams
    assert not broker.client.exists(stuck.lock_key)
    assert broker.client.get(other.lock_key) == holder_value(other).encode()


def test_an_operator_reads_the_queues_dashboard(admin_browser, screenshot_dir, run_burst):
    from tests.testapp.tasks import always_fails, noop, sleep_20ms

    broker = get_store().streams
    write_an_hour_of_history(broker)
    sleep_20ms.dispatch_many({"n": n} for n in range(6))
    always_fails.dispatch({"order": 7})
    run_burst("--queue", "default", "--consumer-name", "web-2-5678-9c1d")
    noop.dispatch_many({"n": n} for n in range(12))
    broker.client.set(keys.leader_key(broker.prefix, broker.group), "web-1-1234-4e2f:a9b1",
                      px=10_000)
    browser = admin_browser

    browser.get(f"{browser.base_url}/admin/django_taskrunner/queue/")
    assert "web-1-1234-4e2f:a9b1" in browser.page_source
    bars = browser.find_elements(By.CSS_SELECTOR, "#queue-default svg.tr-chart rect.done")
    assert len(bars) >= 30
    assert browser.execute_script(  # the app's stylesheet was served and applied
        "return getComputedStyle(document.querySelector('rect.failed')).fill") == \
        "rgb(186, 33, 33)"
    browser.save_screenshot(str(screenshot_dir / "admin-queues.png"))


def write_an_hour_of_history(broker) -> None:  # type: ignore[no-untyped-def]
    """Figures for each minute of the last hour, written the way a worker writes them, and
    a worker whose heartbeat is fresh."""
    import random

    from django_taskrunner.stats.recorder import StatsRecorder, WorkerReport, write

    rng = random.Random(7)  # noqa: S311
    now = app_now_ms()
    broker.ensure_group("default")  # a consumer the group knows, whose worker is live
    broker.add("default", "{}")
    [(entry_id, _body)] = broker.read("default", "web-1-1234-4e2f", 1, None)
    broker.ack("default", [entry_id])
    for minute in range(59, -1, -1):
        recorder = StatsRecorder()
        for _ in range(rng.randrange(40, 160) if minute else 0):
            failed = rng.random() < 0.04
            recorder.ran("default", "tests.testapp.tasks.stamp", rng.uniform(0.004, 0.09),
                         ValueError() if failed else None)
            (recorder.failed if failed else recorder.succeeded)(
                "default", "tests.testapp.tasks.stamp")
        pipe = broker.client.pipeline(transaction=False)
        write(pipe, broker.store.stats, recorder.drain(),
              WorkerReport("web-1-1234-4e2f", ["default"], threads=8, busy=2, min_workers=None,
                        max_workers=8, started_ms=now - 3_600_000),
              now_ms=now - minute * 60_000, window=200, ttl=600)
        pipe.execute()
