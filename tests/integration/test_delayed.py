"""Delayed and scheduled tasks run once, not before they are due, and soon after.

"Soon" is checked loosely (within `LATE_BOUND` seconds, far under the scheduler's 5 s
safety resync); the real lateness figures come from bench/delayed_timing.py.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from django_taskrunner import (
    InvalidTaskPayload,
    RedisUnavailable,
    TaskNotFound,
    dispatch_delayed,
    schedule_for,
)
from django_taskrunner.store import get_store, keys
from tests.integration.scheduling_helpers import leads, running_worker, wait_for
from tests.testapp.tasks import fails_once_with_backoff, noop, runs_key, stamp, stamps_key
from tests.worker_helpers import MovableClock, app_now_ms

pytestmark = pytest.mark.django_db(transaction=True)

LATE_BOUND_MS = 2000


def starts(r, n) -> list[int]:
    return [int(v) for v in r.lrange(f"{stamps_key()}:{n}", 0, -1)]


def delayed_count(r, queue: str = "default") -> int:
    return r.zcard(keys.delayed_key(get_store().prefix, queue))


def test_delays_of_0_02_and_2_seconds_and_a_past_when_run_once_on_time(r):
    with running_worker() as worker:
        wait_for(lambda: leads(worker), 5)
        # Given four tasks: due now, in 0.2 s, in 2 s, and at a time already past
        now = app_now_ms()
        dues = {0: now, 1: now + 200, 2: now + 2000, 3: now}
        stamp.dispatch_delayed({"n": 0}, delay=0)
        dispatch_delayed(stamp, {"n": 1}, delay=0.2)
        stamp.dispatch_delayed({"n": 2}, delay=timedelta(seconds=2))
        schedule_for(stamp, {"n": 3}, when=datetime.now(UTC) - timedelta(hours=1))

        # When they have all run
        wait_for(lambda: all(starts(r, n) for n in dues), 10)
        # A wrong second promotion would show by the time a later delayed task has run
        stamp.dispatch_delayed({"n": "marker"}, delay=0.05)
        wait_for(lambda: starts(r, "marker"), 10)

    # Then each ran exactly once, never before its due time, and soon after it
    for n, due in dues.items():
        (started,) = starts(r, n)
        assert due <= started < due + LATE_BOUND_MS, (n, started - due)
    assert delayed_count(r) == 0


def test_a_delay_of_zero_or_a_past_time_is_a_plain_dispatch(r):
    stream = get_store().streams.stream("default")

    stamp.dispatch_delayed({"n": 1}, delay=0)
    stamp.dispatch_delayed({"n": 2}, delay=-5)
    stamp.schedule_for({"n": 3}, when=datetime(2001, 1, 1, tzinfo=UTC))

    assert delayed_count(r) == 0
    assert r.xlen(stream) == 3


def test_a_delayed_task_waits_in_the_delayed_set_until_due(r):
    message = stamp.dispatch_delayed({"n": 1}, delay=30, expires=10)

    ((body, score),) = r.zrange(keys.delayed_key(get_store().prefix, "default"), 0, -1,
                                withscores=True)
    assert message.id in body.decode()
    due = int(score)
    assert abs(due - (app_now_ms() + 30_000)) < 1000
    # expires counts from the due time, not from the dispatch
    assert message.expires_at_ms == due + 10_000
    assert r.xlen(get_store().streams.stream("default")) == 0


def test_burst_mode_runs_what_is_due_and_leaves_what_is_not(r, run_burst, monkeypatch):
    stamp.dispatch_delayed({"n": "soon"}, delay=0.2)
    stamp.dispatch_delayed({"n": "later"}, delay=60)
    MovableClock.install(monkeypatch).advance(0.3)

    run_burst("--queue", "default")

    assert len(starts(r, "soon")) == 1
    assert starts(r, "later") == []
    assert delayed_count(r) == 1


def test_a_retried_task_waits_its_backoff_in_the_delayed_set(r):
    with running_worker() as worker:
        wait_for(lambda: leads(worker), 5)
        fails_once_with_backoff.dispatch({"n": 1})
        attempts_key = f"{stamps_key()}:backoff:1"

        # The failed first attempt puts attempt 2 in the delayed set, not on the stream
        wait_for(lambda: delayed_count(r) == 1, 5)
        ((body, score),) = r.zrange(keys.delayed_key(get_store().prefix, "default"), 0, -1,
                                    withscores=True)
        assert b'"attempt":2' in body

        wait_for(lambda: r.llen(attempts_key) == 2, 10)

    first, second = (int(v) for v in r.lrange(attempts_key, 0, -1))
    assert second >= first + 600  # the task's retry_backoff
    assert second >= int(score)
    assert int(r.hget(runs_key(), "fails_once_with_backoff:1")) == 2
    assert delayed_count(r) == 0


def test_an_earlier_task_wakes_a_scheduler_sleeping_until_a_later_one(r):
    with running_worker() as worker:
        wait_for(lambda: leads(worker), 5)
        # Given a scheduler that knows only of a task due in a minute
        stamp.dispatch_delayed({"n": "late"}, delay=60)
        [(_body, late_due)] = r.zrange(keys.delayed_key(get_store().prefix, "default"), 0, -1,
                                       withscores=True)
        wait_for(lambda: worker.scheduling.scheduler._next_due.get("default") == late_due, 5)

        # When a task due in 0.3 s is added
        due = app_now_ms() + 300
        stamp.dispatch_delayed({"n": "early"}, delay=0.3)

        # Then it runs on time, not at the scheduler's next 5 s resync
        wait_for(lambda: starts(r, "early"), 5)
    (started,) = starts(r, "early")
    assert due <= started < due + LATE_BOUND_MS


def test_a_delayed_task_on_another_queue_is_promoted_by_the_leader(r):
    with running_worker("default", "other") as worker:
        wait_for(lambda: leads(worker), 5)
        stamp.dispatch_delayed({"n": 1}, delay=0.2, queue="other")
        wait_for(lambda: starts(r, 1), 5)
    assert delayed_count(r, "other") == 0


def test_a_worker_started_with_no_scheduler_never_leads(r):
    with running_worker(scheduler=False) as worker:
        stamp.dispatch_delayed({"n": 1}, delay=0.1)
        noop.dispatch({"n": "marker"})  # the worker is up and running tasks...
        wait_for(lambda: r.hget(runs_key(), "noop:marker"), 10)
        # ...and had time to lead and promote the task, due 0.1 s after its dispatch: no
        # event says "did not", so a fixed wait is the honest check
        time.sleep(0.5)
        assert worker.scheduling is None
        assert starts(r, 1) == []
        assert r.get(keys.leader_key(get_store().prefix, get_store().group)) is None
    assert delayed_count(r) == 1


def test_bad_dispatches_raise_clear_errors_and_add_nothing(r):
    with pytest.raises(TaskNotFound):
        dispatch_delayed("no.such.task", {}, delay=5)
    with pytest.raises(InvalidTaskPayload):
        stamp.dispatch_delayed({"n": object()}, delay=5)
    with pytest.raises(TypeError, match="delay must be"):
        stamp.dispatch_delayed({"n": 1}, delay="5")
    with pytest.raises(TypeError, match="when must be"):
        stamp.schedule_for({"n": 1}, when="2030-01-01")
    assert delayed_count(r) == 0


def test_redis_down_raises_redis_unavailable(taskrunner_settings):
    taskrunner_settings(REDIS_URL="redis://127.0.0.1:1/0", CONNECT_TIMEOUT=0.2)
    with pytest.raises(RedisUnavailable):
        stamp.dispatch_delayed({"n": 1}, delay=5)


def test_runtasks_accepts_no_scheduler(r, run_burst, monkeypatch):
    stamp.dispatch_delayed({"n": 1}, delay=0.05)
    MovableClock.install(monkeypatch).advance(0.1)
    run_burst("--no-scheduler")  # burst mode still moves what is due
    assert len(starts(r, 1)) == 1


def test_a_unique_delayed_dispatch_takes_its_lock_now_and_runs_once_when_due(
    r, run_burst, monkeypatch
):
    from django_taskrunner import TaskAlreadyDispatched
    from django_taskrunner.store import get_store
    from tests.testapp.tasks import unique_order

    first = unique_order.dispatch_delayed({"order": "late-1"}, delay=0.3)
    with pytest.raises(TaskAlreadyDispatched) as excinfo:
        unique_order.dispatch({"order": "late-1"})
    assert excinfo.value.holder_id == first.id
    broker = get_store().streams
    assert broker.client.zcard(f"{broker.prefix}:{{default}}:delayed") == 1

    MovableClock.install(monkeypatch).advance(0.4)
    run_burst()

    assert r.hget(runs_key(), "unique_order:late-1") == b"1"
    unique_order.dispatch({"order": "late-1"})  # the lock freed when it finished


def test_a_delayed_dispatch_with_a_task_id_reserves_it_while_waiting():
    from django_taskrunner import TaskIdConflict, dispatch_delayed

    dispatch_delayed(noop, {"n": 1}, delay=60, task_id="later-1")
    with pytest.raises(TaskIdConflict):
        dispatch_delayed(noop, {"n": 2}, delay=5, task_id="later-1")
