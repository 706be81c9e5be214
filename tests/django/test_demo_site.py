"""The demo site in testproject/ works: an order sends its receipt through the worker."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT, worker_env


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
    env = worker_env(prefix, redis_url, REDIS_URL=redis_url, DATABASE_URL="",
                     TASKRUNNER_PREFIX=prefix, DEMO_DB_PATH=str(tmp_path / "demo.sqlite3"))
    env["DJANGO_SETTINGS_MODULE"] = "testproject.settings"
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OK" in result.stdout
