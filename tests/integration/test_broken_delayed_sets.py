"""A delayed set Redis refuses to serve (a key of another type) stops only its own
queue's moves, with one clear log line naming the key: the leader's scheduler keeps
moving every other queue's due tasks. A body in a set that is not a message is moved
with the others, and the worker fails it on its own."""

from __future__ import annotations

import logging

import pytest

from django_taskrunner.core.dispatch import new_message
from django_taskrunner.scheduling.scheduler import Scheduler
from django_taskrunner.store import get_store, keys
from tests.testapp.tasks import noop
from tests.worker_helpers import app_now_ms

pytestmark = pytest.mark.django_db(transaction=True)


def put_due(r, queue: str, body: str) -> None:
    r.zadd(keys.delayed_key(get_store().prefix, queue), {body: app_now_ms() - 1000})


def test_a_delayed_set_of_the_wrong_type_does_not_stop_other_queues(r, caplog):
    broker = get_store().streams
    # Given queue "aaa"'s delayed set is a string, and "bbb" has a due task
    bad = keys.delayed_key(broker.prefix, "aaa")
    r.set(bad, "not a sorted set")
    put_due(r, "bbb", new_message(noop, {"n": 1}, queue="bbb").to_json())
    scheduler = Scheduler(broker, ["aaa", "bbb"])
    pubsub = scheduler.store.subscription()
    try:
        with caplog.at_level(logging.ERROR):
            # When the scheduler takes two turns
            scheduler.turn(pubsub)
            put_due(r, "bbb", new_message(noop, {"n": 2}, queue="bbb").to_json())
            scheduler._next_due["bbb"] = 0  # as a wake-up would
            scheduler.turn(pubsub)
    finally:
        pubsub.close()

    # Then "bbb"'s tasks are on their stream, and the bad key is logged once, by name
    assert r.xlen(broker.stream("bbb")) == 2
    assert r.zcard(keys.delayed_key(broker.prefix, "bbb")) == 0
    lines = [rec for rec in caplog.records if bad in rec.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.ERROR


def test_a_body_that_is_not_a_message_is_moved_with_the_others(r):
    broker = get_store().streams
    # Given a due set holding a broken body between two good ones
    put_due(r, "bbb", new_message(noop, {"n": 1}, queue="bbb").to_json())
    put_due(r, "bbb", "{not json")
    put_due(r, "bbb", new_message(noop, {"n": 2}, queue="bbb").to_json())
    scheduler = Scheduler(broker, ["bbb"])
    pubsub = scheduler.store.subscription()
    try:
        # When the scheduler takes a turn
        scheduler.turn(pubsub)
    finally:
        pubsub.close()
    # Then all three are on the stream (the worker fails the broken one on its own)
    assert r.xlen(broker.stream("bbb")) == 3


def test_a_known_queues_key_of_the_wrong_type_does_not_stop_promotion(r, caplog):
    broker = get_store().streams
    # Given the known queues' sorted set holds a string, and "bbb" has a due task
    seen = keys.queues_seen_key(broker.prefix)
    r.set(seen, "not a sorted set")
    put_due(r, "bbb", new_message(noop, {"n": 1}, queue="bbb").to_json())
    scheduler = Scheduler(broker, ["bbb"])
    pubsub = scheduler.store.subscription()
    try:
        with caplog.at_level(logging.ERROR):
            # When the scheduler takes a turn
            scheduler.turn(pubsub)
    finally:
        pubsub.close()
    # Then the queue it consumes is promoted all the same, and the key is named in a log
    assert r.xlen(broker.stream("bbb")) == 1
    assert any(seen in rec.getMessage() for rec in caplog.records)
