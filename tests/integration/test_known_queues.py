"""A queue used only through `dispatch(queue=...)` is a known queue: the dashboard,
the Prometheus metrics and the leader's promotions see it."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from django_taskrunner import dispatch, dispatch_delayed
from django_taskrunner.stats.figures import dashboard_queues
from django_taskrunner.store import Store
from tests.testapp.tasks import noop
from tests.worker_helpers import app_now_ms

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_queue_named_only_at_dispatch_is_known(r):
    assert "reports-only" not in dashboard_queues()
    dispatch(noop, {"n": 1}, queue="reports-only")
    dispatch_delayed(noop, {"n": 2}, delay=60, queue="later-only")
    assert {"reports-only", "later-only"} <= set(dashboard_queues())


def test_the_queue_is_announced_once_per_process(r):
    dispatch(noop, {"n": 1}, queue="announced")
    r.config_resetstat()
    dispatch(noop, {"n": 2}, queue="announced")
    assert "cmdstat_zadd" not in r.info("commandstats")


def test_the_metrics_list_a_queue_named_only_at_dispatch(r, client):
    parser = pytest.importorskip("prometheus_client.parser")
    dispatch(noop, {"n": 1}, queue="metrics-only")
    client.force_login(User.objects.create_user("ops", password="pw", is_staff=True))  # noqa: S106

    text = client.get("/metrics/").content.decode()

    lengths = {sample.labels["queue"]: sample.value
               for family in parser.text_string_to_metric_families(text)
               for sample in family.samples if sample.name == "taskrunner_queue_length"}
    assert lengths["metrics-only"] == 1


def test_runtasks_without_queues_consumes_a_queue_named_only_at_dispatch(r, run_burst):
    from django_taskrunner import get_stats

    dispatch(noop, {"n": 1}, queue="dispatch-only")
    run_burst()
    stats = get_stats("dispatch-only")
    assert (stats.length, stats.succeeded) == (0, 1)


def test_without_redis_the_default_queues_are_the_configured_ones(r, prefix, caplog):
    import redis

    from django_taskrunner.management.commands.runtasks import Command

    dispatch(noop, {"n": 1}, queue="dispatch-only")
    gone = Store(redis.Redis(port=1, socket_connect_timeout=1), prefix, "workers").streams
    with caplog.at_level("WARNING", logger="django_taskrunner"):
        queues = Command._default_queues("default", gone)  # nothing listens on port 1
    assert "default" in queues and "dispatch-only" not in queues
    assert "cannot read the known queues from Redis" in caplog.text


def _store():
    from django_taskrunner.store import get_store

    return get_store().schedule


def test_the_tasks_backend_queues_are_known(r):
    assert "framework" in dashboard_queues()  # TASKS["default"]["QUEUES"] of the settings


def test_a_mistyped_queue_a_worker_consumed_is_listed_then_forgotten_once_idle_and_empty(r):
    from django_taskrunner.management.commands.runtasks import Command
    from django_taskrunner.scheduling.scheduler import forget_after_ms, forget_idle_queues
    from django_taskrunner.store import get_store
    from tests.worker_helpers import wait_for, worker_thread

    with worker_thread(queues=("emials",)):  # its heartbeat makes the queue seen
        wait_for(lambda: "emials" in dashboard_queues())
    # A worker started without -Q does not consume it: no dispatch ever used it.
    assert "emials" not in Command._default_queues("default", get_store().streams)

    now = app_now_ms()
    assert forget_idle_queues(_store(), now) == []  # seen just now: kept
    assert "emials" in forget_idle_queues(_store(), now + forget_after_ms() + 1000)
    assert "emials" not in dashboard_queues()


def test_a_queue_not_seen_for_long_is_kept_while_it_holds_messages(r):
    from django_taskrunner.scheduling.scheduler import forget_after_ms, forget_idle_queues

    dispatch(noop, {"n": 1}, queue="stale-full")
    dispatch_delayed(noop, {"n": 2}, delay=3600, queue="stale-later")
    later = app_now_ms() + forget_after_ms() + 1000
    forgotten = forget_idle_queues(_store(), later)
    assert "stale-full" not in forgotten and "stale-later" not in forgotten
    assert {"stale-full", "stale-later"} <= set(dashboard_queues())


def test_a_queue_seen_again_after_the_leader_read_it_is_kept(r):

    store = _store()
    store.add_known_queues(["back-again"], app_now_ms())
    assert store.forget_queue("back-again", app_now_ms() - 60_000) is False
    assert store.forget_queue("back-again", app_now_ms() + 60_000) is True
    assert "back-again" not in store.known_queues()


def test_runtasks_without_queues_consumes_queues_dispatched_to_recently_only(r):
    from django_taskrunner.management.commands.runtasks import Command
    from django_taskrunner.scheduling.scheduler import forget_after_ms
    from django_taskrunner.store import get_store

    store = _store()
    store.add_known_queues(["used-lately"], app_now_ms(), used=True)
    store.add_known_queues(["used-long-ago"], app_now_ms() - forget_after_ms() - 1000, used=True)
    store.add_known_queues(["consumed-only"], app_now_ms())
    queues = Command._default_queues("default", get_store().streams)
    assert "used-lately" in queues and "framework" in queues
    assert "used-long-ago" not in queues and "consumed-only" not in queues


def test_the_older_plain_set_of_known_queues_is_still_read_and_folded_in(r, prefix):
    from django_taskrunner.scheduling.scheduler import forget_after_ms, forget_idle_queues
    from django_taskrunner.store import get_store, keys

    r.sadd(keys.known_queues_key(get_store().prefix), "from-before")
    assert "from-before" in dashboard_queues()
    store = _store()
    assert forget_idle_queues(store, app_now_ms()) == []  # folded in, seen now
    assert not r.exists(keys.known_queues_key(get_store().prefix))
    assert "from-before" in store.queue_sightings()
    assert "from-before" in forget_idle_queues(store, app_now_ms() + forget_after_ms() + 1000)


def _scheduler_thread(moved_clock):  # type: ignore[no-untyped-def]
    from django_taskrunner.scheduling.scheduler import Scheduler
    from django_taskrunner.store import get_store

    scheduler = Scheduler(get_store().streams, ["default"], now_ms=moved_clock.now_ms)
    scheduler.start()
    return scheduler


@pytest.mark.parametrize("forget_after", [3600, 0])
def test_the_leaders_scheduler_loop_forgets_idle_queues_after_queue_forget_after(
        r, monkeypatch, taskrunner_settings, forget_after):
    from django_taskrunner.scheduling.scheduler import CHECK_EVERY_MS
    from tests.worker_helpers import MovableClock, wait_for

    taskrunner_settings(QUEUE_FORGET_AFTER=forget_after)
    moved = MovableClock.install(monkeypatch)
    store = _store()
    store.add_known_queues(["emials"], app_now_ms())
    scheduler = _scheduler_thread(moved)
    try:
        wait_for(lambda: "emials" in scheduler.queues)  # its first turn kept it: seen now
        moved.advance(3600 + CHECK_EVERY_MS / 1000 + 1)  # due for the next check, unseen
        after = app_now_ms()
        wait_for(lambda: scheduler._resync_at > after)  # a turn of the loop since
        if forget_after:
            wait_for(lambda: "emials" not in store.queue_sightings())
            assert "emials" not in scheduler.queues
        else:
            assert "emials" in store.queue_sightings() and "emials" in scheduler.queues
    finally:
        scheduler.stop()
