"""The console pages in a real browser at 1280x800: the Tasks list and a task's page,
the running list and the queues dashboard refreshing themselves, purging a queue, and
every page fitting the screen's width (no sideways scrolling)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from django_taskrunner.models import FailedTask, PeriodicTask
from django_taskrunner.store import get_store, keys
from tests.e2e.conftest import click_and_wait

pytestmark = pytest.mark.django_db(transaction=True)

WIDTH, HEIGHT = 1280, 800
LONG_ERROR_CLASS = "shop.integrations.payments.gateways.providers.stripe.errors.CardDeclinedError"
LONG_LINE = "  File \"/srv/shop/" + "deeply/nested/" * 20 + "tasks.py\", line 7, in charge"


@pytest.fixture
def console(admin_browser):
    """The logged-in browser with a 1280x800 viewport (put back afterwards)."""
    browser = admin_browser
    old = browser.get_window_size()
    browser.set_window_size(WIDTH, HEIGHT)
    inner = browser.execute_script("return [window.innerWidth, window.innerHeight]")
    browser.set_window_size(2 * WIDTH - inner[0], 2 * HEIGHT - inner[1])
    assert browser.execute_script("return window.innerWidth") == WIDTH
    yield browser
    browser.set_window_size(old["width"], old["height"])


def page_width(browser) -> int:  # type: ignore[no-untyped-def]
    """The page's width, or the widest scrolling table box (the admin's `.results` scrolls
    a wide table inside itself, which hides columns just the same)."""
    return browser.execute_script(
        "var boxes = Array.from(document.querySelectorAll('.results'));"
        "return Math.max(document.documentElement.scrollWidth, ...boxes.map("
        "  b => b.scrollWidth > b.clientWidth ? b.scrollWidth + 1280 - b.clientWidth : 0))")


def open_page(browser, path: str) -> None:  # type: ignore[no-untyped-def]
    browser.get(f"{browser.base_url}{path}")
    WebDriverWait(browser, 15).until(
        lambda b: b.execute_script("return document.readyState") == "complete")


def failed_row(n: int) -> FailedTask:
    return FailedTask.objects.create(
        task_name="tests.testapp.tasks.always_fails", queue="default", message_id=f"e2e-c-{n}",
        payload=json.dumps({"order": n, "note": "<script>alert(1)</script>"}),
        error_class=LONG_ERROR_CLASS,
        error="CardDeclinedError: the card was declined by the issuing bank (insufficient "
              "funds) after three attempts",
        traceback=f"Traceback (most recent call last):\n{LONG_LINE}\n    charge()\n"
                  f"{LONG_ERROR_CLASS}: declined", attempts=3, worker="web-1-1234",
        failed_at=timezone.now())


def test_every_console_page_fits_a_1280_px_screen(console, screenshot_dir):
    from tests.testapp.tasks import noop, stamp, unique_order

    row = failed_row(1)
    failed_row(2)
    noop.dispatch_delayed({"order": 41, "lines": list(range(40)), "note": "x" * 300},
                          delay=timedelta(minutes=5))
    stamp.dispatch_delayed({"order": 42}, delay=timedelta(hours=2))
    unique_order.dispatch({"order": "A-" + "9" * 60})
    noop.dispatch_many({"n": n, "email": f"customer-{n}@example.com"} for n in range(30))
    PeriodicTask.objects.create(name="nightly report", task_name="tests.testapp.tasks.noop",
                                cron="0 3 * * *")
    browser = console
    pages = {
        "failed list": "/admin/django_taskrunner/failedtask/",
        "failed detail": f"/admin/django_taskrunner/failedtask/{row.pk}/change/",
        "delayed": "/admin/django_taskrunner/delayedtask/?queue=default",
        "locks": "/admin/django_taskrunner/uniquelock/",
        "queues": "/admin/django_taskrunner/queue/",
        "tasks": "/admin/django_taskrunner/task/?queue=default",
        "periodic": "/admin/django_taskrunner/periodictask/",
    }
    widths = {}
    for name, path in pages.items():
        open_page(browser, path)
        widths[name] = page_width(browser)
    too_wide = {name: width for name, width in widths.items() if width > WIDTH}
    assert not too_wide, too_wide

    open_page(browser, pages["queues"])
    label_px = browser.execute_script(  # the chart's labels as tall as the page's text
        "return document.querySelector('svg.tr-chart text').getBoundingClientRect().height")
    assert label_px >= 11, label_px
    open_page(browser, pages["failed detail"])
    scrolls = browser.execute_script(
        "var pre = document.querySelector('.field-traceback_pre pre');"
        "return [pre.scrollWidth > pre.clientWidth, getComputedStyle(pre).overflowX]")
    assert scrolls == [True, "auto"]  # the long line scrolls, it is not cut off
    browser.save_screenshot(str(screenshot_dir / "console-failed-task-1280.png"))
    open_page(browser, pages["failed list"])
    browser.save_screenshot(str(screenshot_dir / "console-failed-tasks-1280.png"))


def test_an_operator_opens_a_queued_task_from_the_list(console, screenshot_dir):
    from tests.testapp.tasks import noop, unique_order

    noop.dispatch_many({"n": n, "email": f"customer-{n}@example.com"} for n in range(8))
    wanted = unique_order.dispatch({"order": "<script>alert(1)</script>"})
    browser = console

    open_page(browser, "/admin/django_taskrunner/task/?queue=default")
    assert "&lt;script&gt;" in browser.page_source and wanted.id in browser.page_source
    browser.save_screenshot(str(screenshot_dir / "console-tasks.png"))
    link = browser.find_element(By.XPATH, f"//tr[td[text()='{wanted.id}']]//a")
    click_and_wait(browser, link)

    assert "queued" in browser.page_source and "held by this task" in browser.page_source
    browser.save_screenshot(str(screenshot_dir / "console-task-detail.png"))
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "a.tr-lock-link"))
    assert wanted.id in browser.page_source  # the locks page, filtered to its lock


def test_the_running_list_refreshes_itself(console, screenshot_dir):
    from tests.testapp.tasks import noop

    broker = get_store().streams
    noop.dispatch_many({"n": n} for n in range(3))
    broker.ensure_group("default")
    broker.read("default", "web-1-1234-4e2f", 1, None)
    browser = console

    open_page(browser, "/admin/django_taskrunner/task/?queue=default&status=running")
    rows = browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
    assert len(rows) == 1
    broker.read("default", "web-2-5678-9c1d", 2, None)  # two more start running

    WebDriverWait(browser, 20).until(lambda b: len(
        b.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")) == 3)
    assert "web-2-5678-9c1d" in browser.page_source
    browser.save_screenshot(str(screenshot_dir / "console-running.png"))


def test_the_dashboard_refreshes_itself_and_purges_a_queue(console, screenshot_dir):
    from tests.testapp.tasks import noop, unique_order

    broker = get_store().streams
    noop.dispatch_many({"n": n} for n in range(5))
    browser = console

    open_page(browser, "/admin/django_taskrunner/queue/?queue=default")
    length = browser.find_element(By.CSS_SELECTOR, "td[data-field=length]")
    assert length.text == "5"
    unique_order.dispatch({"order": "late"})
    noop.dispatch_delayed({"n": 9}, delay=timedelta(hours=1))

    WebDriverWait(browser, 20).until(lambda b: b.find_element(
        By.CSS_SELECTOR, "td[data-field=length]").text == "6")  # no reload: the same page
    assert browser.find_element(By.TAG_NAME, "html") is not None
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, ".tr-purge-form button"))
    assert "6 waiting messages" in browser.page_source
    assert "1 delayed task" in browser.page_source
    browser.save_screenshot(str(screenshot_dir / "console-purge.png"))
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "input[type=submit]"))

    assert "removed 6 waiting message(s) and 1 delayed task(s)" in browser.page_source
    assert broker.length("default") == 0
    assert broker.client.zcard(keys.delayed_key(broker.prefix, "default")) == 0
    browser.save_screenshot(str(screenshot_dir / "console-queues-1280.png"))
