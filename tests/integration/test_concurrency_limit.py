"""Concurrency limits: at most N running at once per key across workers, while other
keys run side by side; slots are freed with the ack and nothing is retried for waiting."""

from __future__ import annotations

import json

import pytest

from django_taskrunner import lookup
from django_taskrunner.models import FailedTask
from django_taskrunner.store import get_store, keys
from tests.integration.scheduling_helpers import leads, running_worker, wait_for
from tests.testapp.limit_tasks import (
    LIMITS_QUEUE,
    async_one_at_a_time,
    key_not_a_string,
    limit_runs_key,
    one_per_key,
    spans_key,
)
from tests.worker_helpers import app_now_ms

pytestmark = pytest.mark.django_db(transaction=True)


def spans(r) -> list[tuple[str, float, float]]:
    return [tuple(json.loads(raw)) for raw in r.lrange(spans_key(), 0, -1)]


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The largest number of intervals open at one moment."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals],
                    key=lambda event: (event[0], event[1]))
    open_now = peak = 0
    for _, change in events:
        open_now += change
        peak = max(peak, open_now)
    return peak


def test_one_key_runs_one_at_a_time_on_two_workers_while_other_keys_run_in_parallel(r):
    with running_worker(LIMITS_QUEUE, consumer="c1", concurrency=4) as one, \
            running_worker(LIMITS_QUEUE, consumer="c2", concurrency=4) as two:
        wait_for(lambda: leads(one) or leads(two), 10)
        # Given 8 tasks on key "a" limited to one at a time, and 6 on keys of their own
        messages = one_per_key.dispatch_many([{"k": "a", "n": n} for n in range(8)])
        one_per_key.dispatch_many([{"k": f"b{n}", "n": f"b{n}", "hold": 0.5}
                                   for n in range(6)])

        # When all have run
        wait_for(lambda: len(spans(r)) == 14, 60)

    # Then key "a" never ran twice at once, the other keys did run side by side
    found = spans(r)
    assert most_at_once([(s, e) for k, s, e in found if k == "a"]) == 1
    assert most_at_once([(s, e) for k, s, e in found if k != "a"]) >= 2
    # each ran once, on its first attempt, and no slot is left held
    assert {int(v) for v in r.hgetall(limit_runs_key()).values()} == {1}
    assert {lookup(m.id).attempt for m in messages} == {1}
    store = get_store().limits
    key = keys.limit_key(store.prefix, LIMITS_QUEUE, "concurrency", one_per_key.name, "a")
    assert store.slot_holders(key, app_now_ms()) == []


def test_a_slot_is_a_lease_held_while_running_and_freed_with_the_ack(r):
    store = get_store().limits
    key = keys.limit_key(store.prefix, LIMITS_QUEUE, "concurrency", one_per_key.name, "z")
    with running_worker(LIMITS_QUEUE) as worker:
        wait_for(lambda: leads(worker), 10)
        message = one_per_key.dispatch({"k": "z", "n": "z", "hold": 1.5})
        # While it runs, its id holds the slot
        assert wait_for(lambda: store.slot_holders(key, app_now_ms()), 10) == [message.id]
        wait_for(lambda: r.hget(limit_runs_key(), "one_per_key:z"), 10)
        # Once it ended, the slot is free again
        wait_for(lambda: not store.slot_holders(key, app_now_ms()), 5)


def test_a_concurrency_key_returning_no_string_fails_the_task_clearly(r):
    with running_worker(LIMITS_QUEUE) as worker:
        wait_for(lambda: leads(worker), 10)
        message = key_not_a_string.dispatch({})
        wait_for(lambda: FailedTask.objects.filter(message_id=message.id).exists(), 10)
        one_per_key.dispatch({"k": "after", "n": "after", "hold": 0})
        wait_for(lambda: r.hget(limit_runs_key(), "one_per_key:after"), 10)
    row = FailedTask.objects.get(message_id=message.id)
    assert "concurrency_key of task" in row.error and "returned 42" in row.error
    assert r.hget(limit_runs_key(), "key_not_a_string") is None


def test_async_tasks_on_the_event_loop_hold_and_free_their_slots_too(r):
    with running_worker(LIMITS_QUEUE, concurrency=2) as worker:
        wait_for(lambda: leads(worker), 10)
        async_one_at_a_time.dispatch_many([{"n": n} for n in range(4)])
        wait_for(lambda: len(spans(r)) == 4, 30)
    assert most_at_once([(s, e) for _k, s, e in spans(r)]) == 1
    store = get_store().limits
    key = keys.limit_key(store.prefix, LIMITS_QUEUE, "concurrency", async_one_at_a_time.name, "")
    assert store.slot_holders(key, app_now_ms()) == []
