"""The task record on a task's page in a real browser (a finished task's result, a
running task's progress and its Cancel), and the queues dashboard seen updating itself;
screenshots for docs/records.md (set TASKRUNNER_SCREENSHOTS=docs/img to refresh them)."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from django_taskrunner import lookup, wait
from tests.e2e.conftest import click_and_wait
from tests.e2e.test_console_pages import console, open_page  # noqa: F401 - the fixture
from tests.worker_helpers import wait_for, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)

DETAIL = "/admin/django_taskrunner/task/detail/?queue=default&id="


def test_a_finished_task_page_shows_its_record_and_result(console, screenshot_dir):  # noqa: F811
    from tests.testapp.tasks import returns_double

    message = returns_double.dispatch({"n": 21})
    call_command("runtasks", "--burst")
    browser = console

    open_page(browser, DETAIL + message.id)
    status = browser.find_element(By.CSS_SELECTOR, ".tr-record-status")
    assert status.text == "succeeded"
    assert '"double": 42' in browser.find_element(By.CSS_SELECTOR, ".tr-record").text
    assert not browser.find_elements(By.CSS_SELECTOR, "input.deletelink")  # nothing to cancel
    browser.save_screenshot(str(screenshot_dir / "console-task-record.png"))


def test_a_running_task_page_shows_its_progress_and_cancels_it(console, screenshot_dir):  # noqa: F811
    from tests.testapp.tasks import runs_until_cancelled

    message = runs_until_cancelled.dispatch({"n": "e2e"})
    browser = console
    with worker_thread():
        wait_for(lambda: (rec := lookup(message.id)) and rec.progress is not None)
        open_page(browser, DETAIL + message.id)
        assert browser.find_element(By.CSS_SELECTOR, ".tr-record-status").text == "running"
        assert '"of": 2' in browser.find_element(By.CSS_SELECTOR, ".tr-progress").text
        browser.save_screenshot(str(screenshot_dir / "console-task-running.png"))

        click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "input.deletelink"))
        assert "Cancel task" in browser.page_source  # the confirmation page
        click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "input[type=submit]"))
        assert wait(message.id, timeout=15).status == "cancelled"

    open_page(browser, DETAIL + message.id)
    assert browser.find_element(By.CSS_SELECTOR, ".tr-record-status").text == "cancelled"
    browser.save_screenshot(str(screenshot_dir / "console-task-cancelled.png"))


def test_the_queues_dashboard_is_seen_updating_without_a_reload(console, screenshot_dir):  # noqa: F811
    from tests.testapp.tasks import noop

    noop.dispatch_many({"n": n} for n in range(3))
    browser = console
    open_page(browser, "/admin/django_taskrunner/queue/?queue=default")
    browser.execute_script("window.trNotReloaded = true")  # gone if the page reloads
    assert browser.find_element(By.CSS_SELECTOR, "td[data-field=length]").text == "3"
    browser.save_screenshot(str(screenshot_dir / "console-queues-live-before.png"))

    noop.dispatch_many({"n": n} for n in range(40))
    WebDriverWait(browser, 20).until(lambda b: b.find_element(
        By.CSS_SELECTOR, "td[data-field=length]").text == "43")
    assert browser.execute_script("return window.trNotReloaded") is True
    panel = browser.find_element(By.ID, "queue-default")  # the queue's own figures too
    assert panel.find_element(By.CSS_SELECTOR, "[data-field=length]").text == "43"
    browser.save_screenshot(str(screenshot_dir / "console-queues-live-after.png"))
