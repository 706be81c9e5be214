"""The outbox in the admin: its line on the queues dashboard (with Redis down too), the
read-only list of its rows, and "Flush now" (POST with CSRF, its own permission, a
confirmation first); its Prometheus gauges and its system check."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from django_taskrunner import dispatch
from django_taskrunner.models import OutboxMessage
from django_taskrunner.store import keys
from tests.django.admin_helpers import logged_in, make_user
from tests.testapp.tasks import noop

pytestmark = pytest.mark.django_db(transaction=True)

DASHBOARD = "/admin/django_taskrunner/queue/"
ROWS = "/admin/django_taskrunner/outboxmessage/"
FLUSH = "/admin/django_taskrunner/outboxmessage/flush/"


@pytest.fixture
def root() -> Client:
    return logged_in(User.objects.create_superuser("root", password="pw"))  # noqa: S106


def leave_rows(count: int, age: timedelta = timedelta(0)) -> list[str]:
    """`count` rows left in the outbox (their fast path kept from running)."""
    with transaction.atomic():
        ids = [dispatch(noop, {"n": index}, transactional=True).id for index in range(count)]
        connection.run_on_commit = []
    OutboxMessage.objects.update(created_at=timezone.now() - age)
    return ids


def test_the_dashboard_shows_the_outbox_count_and_oldest_age(root):
    leave_rows(3, age=timedelta(minutes=4))
    page = root.get(DASHBOARD).content.decode()
    assert "<strong>3</strong> tasks waiting" in page
    assert "4 min 00 s" in page or "4 min 01 s" in page
    assert f'href="{ROWS}"' in page


def test_the_dashboard_shows_the_outbox_with_redis_down(root, taskrunner_settings):
    leave_rows(2)
    taskrunner_settings(REDIS_URL="redis://127.0.0.1:1/0", CONNECT_TIMEOUT=0.2)
    page = root.get(DASHBOARD).content.decode()
    assert "Redis cannot be reached" in page
    assert "<strong>2</strong> tasks waiting" in page


def test_an_empty_outbox_is_shown_as_empty(root):
    assert "Outbox: empty" in root.get(DASHBOARD).content.decode()


def test_the_rows_list_is_read_only_and_escapes_what_it_shows(root):
    [message_id] = leave_rows(1)
    OutboxMessage.objects.update(last_error="<script>alert(1)</script>")
    page = root.get(ROWS).content.decode()
    assert message_id in page
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;" in page
    assert root.get(f"{ROWS}add/").status_code == 403
    row = OutboxMessage.objects.get()
    assert root.post(f"{ROWS}{row.pk}/delete/", {"post": "yes"}).status_code == 403
    assert OutboxMessage.objects.exists()


def test_flush_now_asks_first_then_moves_the_rows(root, r, prefix):
    ids = leave_rows(4)
    assert 'class="flush-outbox"' in root.get(ROWS).content.decode()
    confirm = root.get(FLUSH)
    assert confirm.status_code == 200
    assert "4 rows waiting" in confirm.content.decode()
    assert OutboxMessage.objects.count() == 4  # asking moved nothing

    response = root.post(FLUSH, {"confirm": "yes"}, follow=True)
    assert "Moved 4 outbox row(s) to Redis." in response.content.decode()
    assert not OutboxMessage.objects.exists()
    entries = r.xrange(keys.stream_key(prefix, "default"))
    assert len(entries) == len(ids)


def test_flush_now_needs_post_csrf_and_the_permission():
    leave_rows(1)
    viewer = logged_in(make_user("viewer", "view_outboxmessage"))
    assert viewer.get(ROWS).status_code == 200
    assert 'class="flush-outbox"' not in viewer.get(ROWS).content.decode()
    assert viewer.post(FLUSH, {"confirm": "yes"}).status_code == 403
    nobody = logged_in(make_user("nobody"))
    assert nobody.get(ROWS).status_code == 403

    flusher = logged_in(make_user("flusher", "view_outboxmessage", "flush_outboxmessage"),
                        enforce_csrf_checks=True)
    assert flusher.post(FLUSH, {"confirm": "yes"}).status_code == 403  # no CSRF token
    assert OutboxMessage.objects.count() == 1


def test_prometheus_exports_the_outbox_size_and_oldest_age():
    from prometheus_client.parser import text_string_to_metric_families

    from django_taskrunner.stats.metrics import render

    leave_rows(3, age=timedelta(seconds=90))
    body, _type = render()
    samples = {sample.name: sample.value
               for family in text_string_to_metric_families(body.decode())
               for sample in family.samples}
    assert samples["taskrunner_outbox_size"] == 3
    assert 89 <= samples["taskrunner_outbox_oldest_seconds"] < 200


def test_the_system_check_warns_when_rows_wait_past_the_threshold(taskrunner_settings):
    from django.core import checks

    def outbox_warnings() -> list[checks.CheckMessage]:
        found = checks.run_checks(tags=[checks.Tags.database], databases=["default"])
        return [message for message in found if message.id == "taskrunner.W030"]

    leave_rows(2, age=timedelta(seconds=30))
    taskrunner_settings(OUTBOX_WARN_AGE=60)
    assert outbox_warnings() == []
    taskrunner_settings(OUTBOX_WARN_AGE=10)
    [warning] = outbox_warnings()
    assert "2 task(s) wait in the outbox" in warning.msg
    # Without --database no query is made, as for Django's own database checks.
    assert all(message.id != "taskrunner.W030" for message in checks.run_checks())


def test_the_threshold_setting_is_validated(taskrunner_settings):
    from django_taskrunner.conf import validate_settings

    assert [e.id for e in validate_settings({"OUTBOX_WARN_AGE": 0})] == ["taskrunner.E002"]
    assert [e.id for e in validate_settings({"OUTBOX": "yes"})] == ["taskrunner.E005"]
    assert validate_settings({"OUTBOX": False, "OUTBOX_WARN_AGE": 3600}) == []
