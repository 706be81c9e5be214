"""End-to-end tests in headless Chromium (Debian's chromium + chromium-driver, driven
by Selenium). Where they are missing, the setup installs them when it can (root with
apt-get; set TASKRUNNER_E2E_INSTALL=0 to forbid), else the tests are skipped saying why.

Screenshots go to a temporary folder, or to TASKRUNNER_SCREENSHOTS (e.g. docs/img).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
DRIVER = "chromedriver"
BROWSER_FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1440,1000",
)


def _find_browser() -> tuple[str | None, str | None]:
    binary = next((found for name in CHROMIUM if (found := shutil.which(name))), None)
    return binary, shutil.which(DRIVER)


def _install_browser() -> str | None:
    """Install Debian's chromium and chromium-driver; None when done, else why not."""
    if os.environ.get("TASKRUNNER_E2E_INSTALL") == "0":
        return "TASKRUNNER_E2E_INSTALL=0 forbids installing it"
    if not shutil.which("apt-get"):
        return "there is no apt-get to install it with"
    if os.geteuid() != 0:
        return "installing it needs root (apt-get install chromium chromium-driver)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"],
                    ["apt-get", "install", "-y", "-qq", "chromium", "chromium-driver"]):
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
        if result.returncode != 0:
            return f"{' '.join(command)} failed: {result.stderr.strip()[-300:]}"
    return None


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (pip install selenium)")
    binary, driver = _find_browser()
    if binary is None or driver is None:
        why = _install_browser()
        binary, driver = _find_browser()
        if binary is None or driver is None:
            pytest.skip(f"no headless Chromium for end-to-end tests: {why}")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in BROWSER_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tempfile.mkdtemp(prefix='tr-chromium-')}")
    chrome = webdriver.Chrome(service=Service(driver), options=options)
    chrome.implicitly_wait(5)
    yield chrome
    chrome.quit()


@pytest.fixture(scope="session")
def screenshot_dir() -> Path:
    folder = os.environ.get("TASKRUNNER_SCREENSHOTS")
    path = Path(folder) if folder else Path(tempfile.mkdtemp(prefix="tr-shots-"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _is_stale(element: Any) -> bool:
    """True once `element` left the document. Chromedriver sometimes answers a check made
    while the new page replaces the old with "Node with given id does not belong to the
    document" instead of a stale-element error (what `staleness_of` expects): the same
    fact, so both mean the old page is gone."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as exc:
        if "does not belong to the document" in str(exc):
            return True
        raise
    return False


def click_and_wait(browser: Any, element: Any) -> None:
    """Click something that loads a new page, and wait until the new page has loaded."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    old_page = browser.find_element(By.TAG_NAME, "html")
    element.click()
    WebDriverWait(browser, 15).until(lambda _: _is_stale(old_page))
    WebDriverWait(browser, 15).until(
        lambda b: b.execute_script("return document.readyState") == "complete")


@pytest.fixture
def admin_browser(browser: Any, live_server: Any, django_user_model: Any) -> Any:
    """The browser, logged in to the admin as a superuser through the login form."""
    from selenium.webdriver.common.by import By

    django_user_model.objects.create_superuser("ops", "ops@example.com", "e2e-password")
    browser.delete_all_cookies()
    browser.get(f"{live_server.url}/admin/login/?next=/admin/")
    browser.find_element(By.NAME, "username").send_keys("ops")
    browser.find_element(By.NAME, "password").send_keys("e2e-password")
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "input[type=submit]"))
    assert "Site administration" in browser.page_source
    browser.base_url = live_server.url
    return browser
