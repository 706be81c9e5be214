"""One time format, with seconds, on every page: the failed list's "failed at" too (it
used Django's default, without seconds)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import User

from django_taskrunner.models import FailedTask
from tests.django.admin_helpers import logged_in

pytestmark = pytest.mark.django_db
FAILED = "/admin/django_taskrunner/failedtask/"
SHAPE = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"


def test_the_failed_list_and_row_show_failed_at_with_seconds(settings):
    settings.TIME_ZONE = "UTC"
    root = logged_in(User.objects.create_superuser("root", password="pw"))  # noqa: S106
    row = FailedTask.objects.create(
        task_name="tests.testapp.tasks.noop", queue="default", message_id="m1",
        payload=json.dumps({"n": 1}), error_class="ValueError", error="ValueError: boom",
        traceback="", attempts=1, worker="w1",
        failed_at=datetime(2026, 12, 3, 9, 41, 27, tzinfo=UTC))

    listing = root.get(FAILED).content.decode()
    form = root.get(f"{FAILED}{row.pk}/change/").content.decode()

    assert "2026-12-03 09:41:27" in listing
    assert "2026-12-03 09:41:27" in form
    assert re.search(SHAPE, listing)
