"""The task record on a task's page in a real browser (a finished task's result, a
running task's progress and its Cancel), the Tasks page's finished view and its outcome
filter, and the queues dashboard seen updating itself; screenshots for docs/records.md
(set TASKRUNNER_SCREENSHOTS=docs/img to refresh them)."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from django_taskrunner import lookup, wait
from tests.e2e.conftest import click_and_wait
from tests.e2e.test_console_pages import (  # noqa: F401 - console: the fixture
    WIDTH,
    console,
    open_page,
    page_width,
)
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


def test_the_finished_view_lists_finished_tasks_and_filters_them(console, screenshot_dir):  # noqa: F811
    from tests.testapp.tasks import always_fails, noop, returns_double

    succeeded = [returns_double.dispatch({"n": n}) for n in (1, 2)]
    failed = always_fails.dispatch({"n": "e2e", "note": "a long payload " * 8})
    call_command("runtasks", "--burst", "--concurrency", "1")
    queued = noop.dispatch({"n": "after the burst"})  # not finished: not listed
    assert [lookup(m.id).status for m in (*succeeded, failed)] == [
        "succeeded", "succeeded", "failed"]
    browser = console

    open_page(browser, "/admin/django_taskrunner/task/?queue=default")
    click_and_wait(browser, browser.find_element(By.LINK_TEXT, "finished"))
    rows = finished_rows(browser)
    # newest first: the failure finished last, after its two retries (the two others may
    # share a millisecond)
    assert rows[0][:3] == ["failed", "tests.testapp.tasks.always_fails", failed.id]
    assert len(rows) == 3
    assert {(row[0], row[2]) for row in rows[1:]} == {("succeeded", m.id) for m in succeeded}
    assert queued.id not in browser.page_source
    assert rows[0][3] == "3"  # its last attempt
    assert "ValueError: boom" in rows[0][4]
    assert browser.find_element(By.CSS_SELECTOR, ".tr-status a.selected").text.startswith(
        "finished")
    assert page_width(browser) <= WIDTH  # the error wraps: no column off-screen
    browser.save_screenshot(str(screenshot_dir / "console-tasks-finished.png"))

    outcome = browser.find_element(By.CSS_SELECTOR, ".tr-outcome")
    click_and_wait(browser, outcome.find_element(By.LINK_TEXT, "failed"))
    assert [(row[0], row[2]) for row in finished_rows(browser)] == [("failed", failed.id)]
    assert browser.find_element(By.CSS_SELECTOR, ".tr-outcome a.selected").text == "failed"
    browser.save_screenshot(str(screenshot_dir / "console-tasks-finished-failed.png"))

    outcome = browser.find_element(By.CSS_SELECTOR, ".tr-outcome")
    click_and_wait(browser, outcome.find_element(By.LINK_TEXT, "succeeded"))
    assert sorted(row[2] for row in finished_rows(browser)) == sorted(m.id for m in succeeded)

    outcome = browser.find_element(By.CSS_SELECTOR, ".tr-outcome")
    click_and_wait(browser, outcome.find_element(By.LINK_TEXT, "cancelled"))
    assert finished_rows(browser) == []
    assert "No cancelled task in queue default" in browser.find_element(
        By.CSS_SELECTOR, ".tr-finished-list tbody").text

    outcome = browser.find_element(By.CSS_SELECTOR, ".tr-outcome")
    click_and_wait(browser, outcome.find_element(By.LINK_TEXT, "all"))
    first = browser.find_element(By.CSS_SELECTOR, ".tr-finished-list tbody tr td a")
    click_and_wait(browser, first)  # a row opens the task's page
    assert browser.find_element(By.CSS_SELECTOR, ".tr-record-status").text == "failed"
    assert failed.id in browser.page_source


def finished_rows(browser) -> list[list[str]]:  # type: ignore[no-untyped-def]
    """(status, task, id, attempt, error) of each row of the finished list shown."""
    rows = []
    for tr in browser.find_elements(By.CSS_SELECTOR, ".tr-finished-list tbody tr"):
        cells = [td.text for td in tr.find_elements(By.TAG_NAME, "td")]
        if len(cells) == 8:  # not the "No ... task" row
            rows.append([cells[0], cells[1], cells[2], cells[6], cells[7]])
    return rows
