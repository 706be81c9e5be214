"""The demo site in testproject/ works: an order sends its receipt through the worker."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT, worker_env


def run_in_the_demo(script: str, prefix: str, redis_url: str, tmp_path,
                    timeout: float = 120) -> None:
    """Run `script` under the demo's settings, on a database of its own; it prints OK."""
    env = worker_env(prefix, redis_url, REDIS_URL=redis_url, DATABASE_URL="",
                     TASKRUNNER_PREFIX=prefix, DEMO_DB_PATH=str(tmp_path / "demo.sqlite3"))
    env["DJANGO_SETTINGS_MODULE"] = "testproject.settings"
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,  # noqa: S603
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OK" in result.stdout


def test_the_demo_site_places_an_order_and_the_worker_sends_the_receipt(prefix, redis_url,
                                                                         tmp_path):
    script = """
import django
django.setup()
from django.core.management import call_command
from django.test import Client
call_command("migrate", verbosity=0)
client = Client(HTTP_HOST="localhost")
assert client.get("/").status_code == 200
response = client.post("/orders/", {"email": "demo@example.com", "total": "12.50"})
assert response.status_code == 302, response.status_code
call_command("runtasks", "--burst")
from testproject.shop.models import Order
order = Order.objects.get()
assert order.receipt_sent_at is not None, "the receipt was not sent"
print("OK")
"""
    run_in_the_demo(script, prefix, redis_url, tmp_path)


def test_the_demo_home_links_every_admin_page_and_its_feature_buttons_work(prefix, redis_url,
                                                                            tmp_path):
    script = """
import django
django.setup()
from django.apps import apps
from django.contrib import admin
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
call_command("migrate", verbosity=0)
User.objects.create_superuser("admin", "admin@example.com", "admin")
client = Client(HTTP_HOST="localhost")
home = client.get("/").content.decode()
pages = [m for m in apps.get_app_config("django_taskrunner").get_models()
         if admin.site.is_registered(m)]
assert len(pages) >= 9, pages
for model in pages:
    url = reverse(f"admin:django_taskrunner_{model._meta.model_name}_changelist")
    assert f'href="{url}"' in home, url
for button in ("dispatch-workflow", "dispatch-rate-limited", "dispatch-outbox"):
    assert f'id="{button}"' in home, button
for url in ("/demo/workflow/", "/demo/rate-limited/", "/demo/outbox/"):
    response = client.post(url)
    assert response.status_code == 302, (url, response.status_code)
call_command("runtasks", "--burst")
call_command("runtasks", "--burst")  # the group's callback, queued when its members ended
from testproject.shop.models import Event
events = list(Event.objects.values_list("text", flat=True))
assert any(e.startswith("ship_parcel: parcel") for e in events), events
assert [e for e in events if e.startswith("write_invoice")] == [
    "write_invoice: invoice 1 written (queued on commit)"], events
assert 1 <= len([e for e in events if e.startswith("call_partner_api")]) <= 6, events
client.force_login(User.objects.get())
for model in pages:
    url = reverse(f"admin:django_taskrunner_{model._meta.model_name}_changelist")
    assert client.get(url).status_code == 200, url
print("OK")
"""
    run_in_the_demo(script, prefix, redis_url, tmp_path, timeout=180)


def test_the_demo_database_makes_an_edit_wait_for_a_workers_write_instead_of_failing(
        prefix, redis_url, tmp_path):
    # An admin edit reads a row, then writes it, in one transaction; a worker writes the
    # same table meanwhile (the scheduler, a periodic task's last run). SQLite's default
    # (deferred) transactions refuse that edit's write at once ("database is locked");
    # the demo's IMMEDIATE mode (docs/deployment.md) makes it wait for the lock.
    script = """
import threading, time
import django
django.setup()
from django.core.management import call_command
from django.db import connection, transaction
call_command("migrate", verbosity=0)
from testproject.shop.models import Order
order = Order.objects.create(email="a@example.com", total="1.00")
wrote = threading.Event()

def worker_write():
    with transaction.atomic():
        Order.objects.filter(pk=order.pk).update(report="written by the worker")
        wrote.set()
        time.sleep(0.3)
    connection.close()

with transaction.atomic():  # as the admin's change view
    row = Order.objects.get(pk=order.pk)
    writer = threading.Thread(target=worker_write)
    writer.start()
    wrote.wait(1)  # deferred mode: the worker holds its write lock by now
    row.total = "2.00"
    row.save()
writer.join()
row = Order.objects.get(pk=order.pk)
assert (str(row.total), row.report) == ("2.00", "written by the worker"), row
print("OK")
"""
    run_in_the_demo(script, prefix, redis_url, tmp_path)
