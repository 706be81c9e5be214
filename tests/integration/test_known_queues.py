"""A queue used only through `dispatch(queue=...)` is a known queue: the dashboard,
the Prometheus metrics and the leader's promotions see it."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from django_taskrunner import dispatch, dispatch_delayed
from django_taskrunner.stats.health import dashboard_queues

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_queue_named_only_at_dispatch_is_known(r):
    assert "reports-only" not in dashboard_queues()
    dispatch("tests.testapp.tasks.noop", {"n": 1}, queue="reports-only")
    dispatch_delayed("tests.testapp.tasks.noop", {"n": 2}, delay=60, queue="later-only")
    assert {"reports-only", "later-only"} <= set(dashboard_queues())


def test_the_queue_is_announced_once_per_process(r):
    dispatch("tests.testapp.tasks.noop", {"n": 1}, queue="announced")
    r.config_resetstat()
    dispatch("tests.testapp.tasks.noop", {"n": 2}, queue="announced")
    assert "cmdstat_sadd" not in r.info("commandstats")


def test_the_metrics_list_a_queue_named_only_at_dispatch(r, client):
    parser = pytest.importorskip("prometheus_client.parser")
    dispatch("tests.testapp.tasks.noop", {"n": 1}, queue="metrics-only")
    client.force_login(User.objects.create_user("ops", password="pw", is_staff=True))  # noqa: S106

    text = client.get("/metrics/").content.decode()

    lengths = {sample.labels["queue"]: sample.value
               for family in parser.text_string_to_metric_families(text)
               for sample in family.samples if sample.name == "taskrunner_queue_length"}
    assert lengths["metrics-only"] == 1
