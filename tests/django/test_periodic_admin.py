"""The periodic page lists the schedules declared in code (read-only, with their next
run) above the rows kept in the database."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from django_taskrunner import task
from django_taskrunner.models import PeriodicTask
from tests.internals import unregister_task

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/admin/django_taskrunner/periodictask/"


@pytest.fixture
def declared():
    names = ["tests.nightly_<b>report</b>", "tests.every_ten"]
    task(name=names[0], cron="0 3 * * *")(lambda payload: None)
    task(name=names[1], schedule=10, queue="other")(lambda payload: None)
    yield names
    for name in names:
        unregister_task(name)


def test_code_schedules_are_shown_next_to_the_rows(declared):
    PeriodicTask.objects.create(name="row schedule", task_name="tests.testapp.tasks.noop",
                                interval=60)
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))  # noqa: S106

    response = client.get(URL)

    html = response.content.decode()
    assert "Declared in code (read-only)" in html
    assert "tests.nightly_&lt;b&gt;report&lt;/b&gt;" in html and "<b>report</b>" not in html
    assert "0 3 * * *" in html and "every 10 s" in html
    shown = {s.task_name: s for s in response.context["code_schedules"]}
    assert shown[declared[0]].next_run is not None and shown[declared[0]].next_run.minute == 0
    assert shown[declared[1]].queue == "other"
    assert "row schedule" in html and "every 60 s" in html  # the rows, one schedule column
