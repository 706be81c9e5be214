"""Every console page at 1280 and 390 px wide, light and dark: measured (nothing wider
than the screen: a wide table scrolls inside its own box), and photographed for the docs
(TASKRUNNER_SCREENSHOTS=docs/img)."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.utils import timezone
from selenium.webdriver.support.ui import WebDriverWait

from django_taskrunner import dispatch, pause_queue
from django_taskrunner.models import FailedTask
from tests.testapp.tasks import fails_twice, ignores_cancel, noop, runs_key
from tests.worker_helpers import wait_for, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)

WIDTHS = (1280, 390)

# How wide the page is: the document; the boxes that cut their content without a
# scrollbar; the table boxes that scroll (fine on a phone, not at 1280 px). Text meant
# for screen readers only (Django 6's `visually-hidden` headings: clipped to nothing on
# purpose) is not a cut box.
CLIPPED = """
var doc = document.documentElement.scrollWidth;
var cut = Array.from(document.querySelectorAll('#content *')).filter(function (el) {
  var style = getComputedStyle(el);
  var screenReaderOnly = style.position === 'absolute'
    && (style.clip !== 'auto' || style.clipPath !== 'none');
  return el.scrollWidth > el.clientWidth + 1 && style.overflowX === 'hidden'
    && !screenReaderOnly
    && !el.classList.contains('tr-ellipsis') && style.textOverflow !== 'ellipsis';
}).length;
var scrolled = Array.from(document.querySelectorAll('.results, .tr-scroll')).filter(
  function (box) { return box.scrollWidth > box.clientWidth + 1; }).length;
return [doc, cut, scrolled];
"""


def worker_key(worker) -> str:  # type: ignore[no-untyped-def]
    from django_taskrunner.store import keys

    return keys.worker_key(worker.broker.prefix, worker.consumer)


def viewport(browser, width: int, dark: bool) -> None:  # type: ignore[no-untyped-def]
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": 900, "deviceScaleFactor": 1, "mobile": width < 600})
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [
        {"name": "prefers-color-scheme", "value": "dark" if dark else "light"}]})


def open_page(browser, path: str, dark: bool) -> None:  # type: ignore[no-untyped-def]
    browser.get(f"{browser.base_url}{path}")
    WebDriverWait(browser, 15).until(
        lambda b: b.execute_script("return document.readyState") == "complete")
    browser.execute_script(  # Django's theme toggle keeps its choice here
        "localStorage.setItem('theme', arguments[0]);"
        "document.documentElement.dataset.theme = arguments[0];", "dark" if dark else "light")


def fill(r) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Data behind every page: a retried task, failed rows, a paused queue, a worker."""
    retried = dispatch(fails_twice, {"n": 5})
    call_command("runtasks", "--burst")
    row = FailedTask.objects.create(
        task_name="tests.testapp.tasks.noop", queue="default", message_id="e2e-w-1",
        payload=json.dumps({"order": 1234, "email": "ada@example.com", "lines": [1, 2, 3]}),
        error_class="KeyError", error="KeyError: 'address'", traceback="Traceback ...",
        attempts=3, worker="web-1-1234", failed_at=timezone.now())
    noop.dispatch_many({"n": n} for n in range(5))
    pause_queue("default")
    return {
        "workers": "/admin/django_taskrunner/worker/",
        "queues": "/admin/django_taskrunner/queue/",
        "task timeline": f"/admin/django_taskrunner/task/detail/?queue=default&id={retried.id}",
        "edit and retry": f"/admin/django_taskrunner/failedtask/{row.pk}/edit/",
        "tasks": "/admin/django_taskrunner/task/?queue=default",
        "all tasks": "/admin/django_taskrunner/task/",
        "delayed": "/admin/django_taskrunner/delayedtask/",
        "locks": "/admin/django_taskrunner/uniquelock/",
        "limits": "/admin/django_taskrunner/limit/",
        "workflows": "/admin/django_taskrunner/workflow/",
        "failed list": "/admin/django_taskrunner/failedtask/",
        "periodic": "/admin/django_taskrunner/periodictask/",
    }


def test_every_page_at_1280_and_390_px_light_and_dark(admin_browser, screenshot_dir, r):
    pages = fill(r)
    browser = admin_browser
    measured = {}
    with worker_thread(("default", "other"), concurrency=2, stats_interval=0.2) as worker:
        running = dispatch(ignores_cancel, {"n": 1}, queue="other")
        wait_for(lambda: r.hget(runs_key(), "ignores_cancel:start:1"))
        wait_for(lambda: running.id in (r.hget(worker_key(worker), "running") or b"").decode())
        for width in WIDTHS:
            for dark in (False, True):
                viewport(browser, width, dark)
                for name, path in pages.items():
                    open_page(browser, path, dark)
                    measured[(name, width, dark)] = browser.execute_script(CLIPPED)
                    slug = name.replace(" ", "-")
                    shot = f"console-{slug}-{width}{'-dark' if dark else ''}.png"
                    browser.save_screenshot(str(screenshot_dir / shot))
        from django_taskrunner import cancel

        cancel(running.id, terminate=True)
    browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    too_wide = {key: value for key, value in measured.items()
                if value[0] > key[1] or value[1] or (key[1] == 1280 and value[2])}
    print("page widths (document px, clipped boxes):",
          {f"{n} {w}{' dark' if d else ''}": v for (n, w, d), v in measured.items()})
    assert not too_wide, too_wide
