"""The demo of scripts/demo, as a visitor tries it in two minutes: the real site
(testproject) and a real worker as processes, in headless Chromium. Its screenshots
(docs/img/demo-*.png with TASKRUNNER_SCREENSHOTS=docs/img) show the home page and each
admin page with the demo's own tasks in them."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from selenium.webdriver.common.by import By

from tests.conftest import delete_prefix
from tests.e2e.conftest import click_and_wait
from tests.worker_helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]
ADMIN_PAGES = {  # screenshot name -> admin URL
    "failed-tasks": "/admin/django_taskrunner/failedtask/",
    "delayed-tasks": "/admin/django_taskrunner/delayedtask/",
    "unique-locks": "/admin/django_taskrunner/uniquelock/",
    "queues": "/admin/django_taskrunner/queue/",
    "periodic-tasks": "/admin/django_taskrunner/periodictask/",
}

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True,  # noqa: S603
                   capture_output=True, timeout=120)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - our server
            return response.status == 200
    except OSError:
        return False


@pytest.fixture
def demo(tmp_path: Path, redis_url: str, prefix: str) -> Iterator[str]:
    """What scripts/demo starts (migrate, the admin user, a worker, the server), on the
    test run's Redis under a prefix of its own and a database in tmp_path; its URL."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings",
           "DEMO_DB_PATH": str(tmp_path / "demo.sqlite3"), "REDIS_URL": redis_url,
           "TASKRUNNER_PREFIX": prefix, "PYTHONPATH": str(ROOT),
           "DJANGO_SUPERUSER_PASSWORD": "admin"}
    _manage(env, "migrate", "--noinput")
    _manage(env, "createsuperuser", "--noinput", "--username", "admin",
            "--email", "admin@example.com")
    url = f"http://127.0.0.1:{_free_port()}"
    procs = [subprocess.Popen([sys.executable, "manage.py", *args], cwd=ROOT, env=env,  # noqa: S603
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for args in (["runtasks"], ["runserver", "--noreload", url.removeprefix("http://")])]
    try:
        wait_for(lambda: _answers(url + "/"), timeout=30, step=0.2)
        yield url
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)
        client = redis.Redis.from_url(redis_url)
        delete_prefix(client, prefix)
        client.close()


def _press(browser: Any, button_id: str) -> str:
    click_and_wait(browser, browser.find_element(By.ID, button_id))
    return browser.find_element(By.CSS_SELECTOR, "ul.messagelist").text


def _reload_until(browser: Any, url: str, text: str, timeout: float = 30) -> None:
    def shows() -> bool:
        browser.get(url)
        return text in browser.page_source
    wait_for(shows, timeout=timeout, step=0.5)


def test_a_visitor_tries_every_button_of_the_demo(browser, demo, screenshot_dir):
    browser.delete_all_cookies()
    browser.get(demo + "/admin/login/?next=/")
    browser.find_element(By.NAME, "username").send_keys("admin")
    browser.find_element(By.NAME, "password").send_keys("admin")
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "input[type=submit]"))
    for title in ("Failed tasks", "Delayed tasks", "Unique locks", "Queues", "Periodic tasks"):
        assert browser.find_element(By.LINK_TEXT, title)

    # An order: a post_save signal dispatches its receipt.
    browser.find_element(By.NAME, "email").send_keys("ada@example.com")
    assert "Order placed" in _press(browser, "place-order")

    # A delayed task: the page counts down to it.
    assert "is due in 15 s" in _press(browser, "dispatch-delayed")
    assert re.search(r"#1: starts in 1[0-5] s",
                     browser.find_element(By.ID, "delay").text)

    # A unique task twice: the second dispatch is refused, naming the first as the holder.
    notice = _press(browser, "unique-twice")
    first = re.search(r"First dispatch queued as task (\w+)\.", notice)
    assert first, notice
    assert f"the lock is held by task {first.group(1)}." in notice
    for name in ("unique-locks", "delayed-tasks"):  # the lock and the delayed task, live
        browser.get(demo + ADMIN_PAGES[name])
        assert ("export_orders" if name == "unique-locks" else "say_when") in browser.page_source
        browser.save_screenshot(str(screenshot_dir / f"demo-admin-{name}.png"))

    # A failing task: retried once, then a row of the admin's failed tasks.
    browser.get(demo + "/")
    assert "becomes a failed task" in _press(browser, "dispatch-failing")
    _reload_until(browser, demo + ADMIN_PAGES["failed-tasks"], "the payment service refused")
    browser.save_screenshot(str(screenshot_dir / "demo-admin-failed-tasks.png"))
    for name, shown in (("queues", "reports"), ("periodic-tasks", "count_orders")):
        browser.get(demo + ADMIN_PAGES[name])
        assert shown in browser.page_source
        browser.save_screenshot(str(screenshot_dir / f"demo-admin-{name}.png"))

    # The home page, once the delayed task ran and the export finished.
    _reload_until(browser, demo + "/", "say_when: the delayed task #1 started", timeout=40)
    _reload_until(browser, demo + "/", "export_orders: exported 1 orders", timeout=20)
    assert "send_receipt: receipt for order 1 sent to ada@example.com" in browser.page_source
    browser.save_screenshot(str(screenshot_dir / "demo-home.png"))
