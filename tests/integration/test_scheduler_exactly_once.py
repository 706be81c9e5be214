"""Moving due messages: batches, the next due time, and exactly once even when two
schedulers run at the same moment (as during a lease hand-over)."""

from __future__ import annotations

import json
import time

import pytest

from django_taskrunner.core.dispatch import new_message
from django_taskrunner.scheduling.scheduler import Scheduler, promote_all_due
from django_taskrunner.store import Store, get_store, keys
from django_taskrunner.store.streams import Broker
from tests.integration.scheduling_helpers import wait_for
from tests.testapp.tasks import noop, runs_key
from tests.worker_helpers import app_now_ms

pytestmark = pytest.mark.django_db(transaction=True)


def add_delayed_many(broker: Broker, count: int, due_ms: int, spread: int = 50) -> set[str]:
    """Put `count` noop messages in the delayed set, pipelined, due over `spread` ms from
    `due_ms`; returns their ids."""
    ids = set()
    pipe = broker.client.pipeline(transaction=False)
    for n in range(count):
        message = new_message(noop, {"n": n}, start_ms=due_ms)
        ids.add(message.id)
        score = due_ms + n % spread
        pipe.zadd(keys.delayed_key(broker.prefix, "default"), {message.to_json(): score})
    pipe.execute()
    return ids


def stream_ids(r, broker: Broker) -> list[str]:
    entries = r.xrange(broker.stream("default"))
    return [json.loads(fields[b"m"])["id"] for _, fields in entries]


def test_promote_moves_due_messages_in_batches_and_reports_the_next_due_time(r):
    broker = get_store().streams
    now = app_now_ms()
    add_delayed_many(broker, 120, now - 1000, spread=120)
    later = new_message(noop, {"n": "later"})
    broker.add_delayed("default", later.to_json(), now + 60_000)

    assert broker.promote_due("default", now, 50) == (50, now - 1000 + 50)
    moved = promote_all_due(broker, ["default"], now, batch=50)

    assert moved == 70
    assert r.xlen(broker.stream("default")) == 120
    assert broker.promote_due("default", now, 50) == (0, now + 60_000)
    r.delete(keys.delayed_key(broker.prefix, "default"))
    assert broker.promote_due("default", now, 50) == (0, None)


def test_two_schedulers_at_once_move_10000_due_messages_exactly_once(r, redis_target):
    # Given 10,000 messages falling due within a few ms of each other
    broker = get_store().streams
    due = app_now_ms() + 300
    ids = add_delayed_many(broker, 10_000, due)

    # When two schedulers, each with its own connection, compete for them in small batches
    clients = [redis_target.client() for _ in range(2)]
    schedulers = [Scheduler(Store(client, broker.prefix, broker.group).streams, ["default"],
                            batch=25) for client in clients]
    for scheduler in schedulers:
        scheduler.start()
    try:
        wait_for(lambda: r.zcard(keys.delayed_key(broker.prefix, "default")) == 0, 30)
        time.sleep(0.2)
    finally:
        for scheduler in schedulers:
            scheduler.stop()
        for client in clients:
            client.close()

    # Then every message is on the stream exactly once, and both schedulers took part
    moved = stream_ids(r, broker)
    assert len(moved) == 10_000
    assert set(moved) == ids
    assert sum(s.moved for s in schedulers) == 10_000
    assert all(s.moved > 0 for s in schedulers), [s.moved for s in schedulers]


def test_every_moved_message_then_runs_exactly_once(r, run_burst):
    broker = get_store().streams
    add_delayed_many(broker, 2_000, app_now_ms() - 10)

    run_burst("--queue", "default", "--concurrency", "4", "--batch-size", "100")

    counts = r.hgetall(runs_key())
    assert len(counts) == 2_000
    assert set(counts.values()) == {b"1"}
    assert r.zcard(keys.delayed_key(broker.prefix, "default")) == 0
