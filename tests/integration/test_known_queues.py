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


def test_runtasks_without_queues_consumes_a_queue_named_only_at_dispatch(r, run_burst):
    from django_taskrunner.stats.figures import get_stats

    dispatch("tests.testapp.tasks.noop", {"n": 1}, queue="dispatch-only")
    run_burst()
    stats = get_stats("dispatch-only")
    assert (stats.length, stats.succeeded) == (0, 1)


def test_without_redis_the_default_queues_are_the_configured_ones(r, prefix, caplog):
    import redis

    from django_taskrunner.management.commands.runtasks import Command
    from django_taskrunner.store.broker import Broker

    dispatch("tests.testapp.tasks.noop", {"n": 1}, queue="dispatch-only")
    gone = Broker(redis.Redis(port=1, socket_connect_timeout=1), prefix, "workers")
    with caplog.at_level("WARNING", logger="django_taskrunner"):
        queues = Command._default_queues("default", gone)  # nothing listens on port 1
    assert "default" in queues and "dispatch-only" not in queues
    assert "cannot read the known queues from Redis" in caplog.text
