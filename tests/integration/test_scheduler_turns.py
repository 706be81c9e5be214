"""A long move on one queue does not hold up another queue's delayed tasks: the
scheduler reads the wake-ups that came in even when it has no time left to sleep."""

from __future__ import annotations

import pytest

from django_taskrunner import dispatch_delayed
from django_taskrunner.core.dispatch import new_message
from django_taskrunner.scheduling.scheduler import BATCHES_PER_TURN, Scheduler
from django_taskrunner.store import get_store, keys
from tests.integration.scheduling_helpers import wait_for
from tests.testapp.tasks import noop
from tests.worker_helpers import app_now_ms

pytestmark = pytest.mark.django_db(transaction=True)

BATCH = 10


def test_a_wake_up_during_a_long_move_is_read_at_the_next_turn(r):
    broker = get_store().streams
    # Given a backlog on queue "bulk" that takes several turns to move
    count = BATCH * BATCHES_PER_TURN * 5
    pipe = r.pipeline(transaction=False)
    for n in range(count):
        body = new_message(noop, {"n": n}, queue="bulk").to_json()
        pipe.zadd(keys.delayed_key(broker.prefix, "bulk"), {body: app_now_ms() - 1000})
    pipe.execute()
    scheduler = Scheduler(broker, ["bulk", "default"], batch=BATCH)
    pubsub = scheduler.store.subscription()
    try:
        scheduler.turn(pubsub)  # subscribes to the wake channels, moves one turn's worth
        assert r.zcard(keys.delayed_key(broker.prefix, "bulk")) == count - BATCH * BATCHES_PER_TURN

        # When a task on "default" (no delayed set until now) falls due meanwhile
        due = app_now_ms() + 50
        dispatch_delayed(noop, {"n": "other"}, delay=0.05)
        wait_for(lambda: app_now_ms() > due, 2)
        scheduler.turn(pubsub)  # reads its wake-up
        scheduler.turn(pubsub)  # and moves it

        # Then it is on its stream while the backlog is still moving
        assert r.xlen(broker.stream("default")) == 1
        assert r.zcard(keys.delayed_key(broker.prefix, "bulk")) > 0
    finally:
        pubsub.close()


def test_a_stream_of_wake_ups_cannot_hold_up_a_due_move(r, monkeypatch):
    # While a set is due the scheduler reads the wake-ups waiting, but a bounded number:
    # publishers that never stop must not keep it from its next turn.
    monkeypatch.setattr("django_taskrunner.scheduling.scheduler.WAKE_READS_WHEN_DUE", 5)
    broker = get_store().streams
    scheduler = Scheduler(broker, ["bulk", "default"], batch=BATCH)
    pubsub = scheduler.store.subscription()
    try:
        scheduler.turn(pubsub)  # subscribes to the wake channels
        channel = keys.wake_channel(broker.prefix, "default")
        later = app_now_ms() + 60_000
        for _ in range(50):
            r.publish(channel, str(later))
        wait_for(lambda: pubsub.pubsub.connection.can_read(), 2)
        scheduler.wait(pubsub, app_now_ms() - 1)  # due already: returns after 5 reads
        left = 0
        while pubsub.next_message(timeout=0.2) is not None:
            left += 1
        assert left == 50 - 5
    finally:
        pubsub.close()
