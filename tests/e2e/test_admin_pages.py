"""A person's path through the admin console, in a real browser."""

from __future__ import annotations

import json

import pytest
from django.utils import timezone
from selenium.webdriver.common.by import By

from django_taskrunner import TaskMessage
from django_taskrunner.broker import get_broker
from django_taskrunner.models import FailedTask
from tests.e2e.conftest import click_and_wait

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
    broker = get_broker()
    [(_id, fields)] = broker.client.xrange(broker.stream("default"))
    assert TaskMessage.from_json(fields[b"m"]).payload["n"] == 1
