"""Fair queues: `fair_key` serves a queue's tasks in turns across keys, so one key's
backlog never starves another's; `fair_weight` gives a key several turns in a row.
Starvation, weights, priorities, delayed tasks, unique locks, cancel, purge, a worker
dying between a turn and the run, and bad keys."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from django_taskrunner import (
    InvalidTaskOptions,
    TaskAlreadyDispatched,
    cancel,
    chain,
    dispatch,
    dispatch_delayed,
    dispatch_many,
    lookup,
    task,
)
from django_taskrunner.scheduling.periodic import PeriodicRunner
from django_taskrunner.store import Store, get_store, keys
from tests.internals import unregister_task
from tests.worker_helpers import app_now_ms, wait_for, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)

T0 = 1_800_000_000_000  # a whole minute, in epoch ms

started: list[str] = []
lock = threading.Lock()


def _record(payload: dict) -> None:
    with lock:
        started.append(payload["k"])


@task(name="tests.fair.job", fair_key=lambda payload: payload["k"])
def job(payload: dict) -> None:
    _record(payload)


@task(name="tests.fair.weighted", fair_key=lambda payload: payload["k"],
      fair_weight={"A": 3, "default": 1})
def weighted(payload: dict) -> None:
    _record(payload)


@task(name="tests.fair.unique", fair_key=lambda payload: payload["k"], unique=True,
      unique_for=60, unique_key=lambda payload: f"{payload['k']}-{payload['n']}")
def unique_job(payload: dict) -> None:
    _record(payload)


@pytest.fixture(autouse=True)
def clear_started():
    started.clear()
    yield
    started.clear()


def test_a_burst_of_one_key_does_not_starve_another(r, prefix):
    dispatch_many(job, [{"k": "A", "n": n} for n in range(10_000)])
    dispatch_many(job, [{"k": "B", "n": n} for n in range(100)])

    assert not r.exists(keys.stream_key(prefix, "default"))  # waiting for their turns
    with worker_thread(concurrency=1):
        wait_for(lambda: started.count("B") == 100, timeout=120)
    with lock:
        a_before_last_b = started[:len(started) - started[::-1].index("B")].count("A")
    assert a_before_last_b < 250


def test_weights_give_a_key_turns_in_a_row(r, prefix):
    dispatch_many(weighted, [{"k": "A", "n": n} for n in range(900)])
    dispatch_many(weighted, [{"k": "B", "n": n} for n in range(200)])

    with worker_thread(concurrency=1):
        wait_for(lambda: started.count("B") == 200, timeout=120)
    with lock:
        while_both = started[:len(started) - started[::-1].index("B")]
    ratio = while_both.count("A") / while_both.count("B")
    assert 3 * 0.95 <= ratio <= 3 * 1.05


def test_tasks_without_a_key_and_with_one_all_run_once(r, prefix):
    dispatch_many(job, [{"k": f"k{n % 7}", "n": n} for n in range(70)])
    for n in range(5):
        dispatch(job, {"k": "plain", "n": n}, fair_key="own")

    with worker_thread(concurrency=4):
        wait_for(lambda: len(started) == 75)
    assert sorted(started).count("plain") == 5
    assert not r.exists(keys.fair_ring_key(prefix, "default"))


def test_a_higher_priority_is_served_first_and_fairly_within_its_level(r, prefix):
    dispatch_many(job, [{"k": "low", "n": n} for n in range(20)], priority=1)
    dispatch_many(job, [{"k": "A", "n": n} for n in range(20)], priority=8)
    dispatch_many(job, [{"k": "B", "n": n} for n in range(3)], priority=8)

    with worker_thread(concurrency=1, batch_size=1):
        wait_for(lambda: len(started) == 43)
    assert set(started[:23]) == {"A", "B"}
    assert started[:6] == ["A", "B", "A", "B", "A", "B"]


def test_a_due_delayed_fair_task_joins_its_keys_turn(r, prefix):
    dispatch_delayed(job, {"k": "D", "n": 0}, delay=0.2)
    with worker_thread(concurrency=1):
        wait_for(lambda: started == ["D"], timeout=30)
    assert not r.exists(keys.fair_ring_key(prefix, "default"))


def test_unique_fair_tasks_keep_their_locks(r, prefix):
    first = dispatch(unique_job, {"k": "U", "n": 1})
    with pytest.raises(TaskAlreadyDispatched):
        dispatch(unique_job, {"k": "U", "n": 1})
    with worker_thread(concurrency=1):
        wait_for(lambda: started == ["U"], timeout=30)
    wait_for(lambda: lookup(first.id).status == "succeeded", timeout=30)


def test_a_waiting_fair_task_is_queued_and_can_be_cancelled(r, prefix):
    kept = dispatch(job, {"k": "C", "n": 0})
    dropped = dispatch(job, {"k": "C", "n": 1})

    assert lookup(dropped.id).status == "queued"
    cancel(dropped.id)
    with worker_thread(concurrency=1):
        wait_for(lambda: lookup(kept.id).status == "succeeded", timeout=30)
        wait_for(lambda: lookup(dropped.id).status == "cancelled", timeout=30)
    assert started == ["C"]


def test_a_worker_dying_after_taking_a_turn_loses_nothing(r, prefix):
    dispatch_many(job, [{"k": f"k{n % 3}", "n": n} for n in range(30)])
    # A worker took turns (the tasks moved onto the stream) and died before reading them.
    assert Store(r, prefix).fair.feed("default", 10) == 10

    with worker_thread(concurrency=2):
        wait_for(lambda: len(started) == 30)
    assert sorted(started) == sorted(f"k{n % 3}" for n in range(30))


def test_top_keys_lists_the_keys_with_most_waiting(r, prefix):
    dispatch_many(job, [{"k": "big", "n": n} for n in range(5)])
    dispatch_many(job, [{"k": "small", "n": n} for n in range(2)])

    top = Store(r, prefix).fair.top_keys("default")
    assert [(item.key, item.waiting) for item in top] == [("big", 5), ("small", 2)]


def test_purge_clears_fair_lists_and_ring(r, prefix):
    dispatch_many(job, [{"k": f"p{n % 4}", "n": n} for n in range(12)])

    assert Store(r, prefix).fair.purge("default") == 12
    assert not r.keys(f"{prefix}:*fair*")


@pytest.mark.parametrize("bad", ["", "x" * 257, 42, b"bytes"])
def test_a_bad_fair_key_is_refused_and_nothing_is_queued(r, prefix, bad):
    with pytest.raises(InvalidTaskOptions):
        dispatch(job, {"k": "A", "n": 0}, fair_key=bad)
    with pytest.raises(InvalidTaskOptions):
        dispatch(job, {"k": bad, "n": 0})
    assert not r.keys(f"{prefix}:*")


def test_a_fair_key_callable_that_raises_fails_the_dispatch(r, prefix):
    with pytest.raises(KeyError):
        dispatch(job, {"n": 0})
    with pytest.raises(KeyError):
        dispatch_many(job, [{"k": "A", "n": 0}, {"n": 1}])
    assert not r.keys(f"{prefix}:*")


def test_a_workflow_of_fair_tasks_runs_each_once(r, prefix):
    if get_store().records.clustered:
        pytest.skip("workflows need a single Redis server")
    chain(job.s({"k": "W", "n": 0}), job.s({"k": "W", "n": 1}, fair_key="other")).dispatch()

    with worker_thread(concurrency=1):
        wait_for(lambda: len(started) == 2, timeout=30)
    assert started == ["W", "W"]


def test_an_outbox_fair_task_joins_its_keys_turn_after_the_commit(r, prefix):
    from django.db import transaction

    with transaction.atomic():
        message = dispatch(job, {"k": "O", "n": 0}, transactional=True)
    assert message.fair_key == "O"
    with worker_thread(concurrency=1):
        wait_for(lambda: started == ["O"], timeout=30)


def test_an_outbox_task_without_a_key_joins_the_unkeyed_turn_of_a_fair_queue(r, prefix):
    from django.db import transaction

    dispatch(job, {"k": "B", "n": 0})
    with transaction.atomic():
        dispatch(plain, {"n": 0}, transactional=True)
    wait_for(lambda: r.zcard(f"{prefix}:{{default}}:delayed") == 1)  # due now, to its turn
    get_store().streams.promote_due("default", app_now_ms(), 10)

    assert r.lrange(keys.fair_ring_key(prefix, "default"), 0, -1) == [b"B", b""]
    with worker_thread(concurrency=1):
        wait_for(lambda: sorted(started) == ["-", "B"], timeout=30)


@task(name="tests.fair.limited", fair_key=lambda payload: payload["k"], rate_limit="1/m",
      rate_key=lambda payload: payload["k"])
def limited(payload: dict) -> None:
    _record(payload)


def test_a_rate_limited_key_yields_its_turn_and_its_due_tasks_rejoin_its_list(r, prefix):
    dispatch_many(limited, [{"k": "slow", "n": n} for n in range(3)])
    dispatch_many(limited, [{"k": "other", "n": n} for n in range(1)])

    with worker_thread(concurrency=1):
        wait_for(lambda: sorted(started) == ["other", "slow"], timeout=30)
        # the two over the limit wait in the delayed set, not on the stream
        wait_for(lambda: r.zcard(f"{prefix}:{{default}}:delayed") == 2, timeout=30)
    # When they are due, they join their key's list, not the stream head.
    r.zadd(f"{prefix}:{{default}}:delayed",
           {member: 0 for member in r.zrange(f"{prefix}:{{default}}:delayed", 0, -1)})
    get_store().streams.promote_due("default", app_now_ms(), 10)
    assert r.llen(f"{prefix}:{{default}}:fair:slow") == 2
    assert r.lrange(keys.fair_ring_key(prefix, "default"), 0, -1) == [b"slow"]


def test_a_periodic_fair_task_joins_its_keys_turn(r, prefix):
    @task(name="tests.fair.periodic", schedule=60, fair_key=lambda payload: "tick")
    def periodic(payload: Any) -> None:
        _record({"k": "tick"})

    try:
        runner = PeriodicRunner(get_store().streams, with_rows=False)
        runner.load(T0 + 5_000)
        runner.run_due(T0 + 60_000)
        assert r.zcard(f"{prefix}:{{default}}:delayed") == 1  # due at once, to its turn
        get_store().streams.promote_due("default", T0 + 60_000, 10)
        assert r.lrange(keys.fair_ring_key(prefix, "default"), 0, -1) == [b"tick"]
        with worker_thread(concurrency=1):
            wait_for(lambda: started == ["tick"], timeout=30)
    finally:
        unregister_task("tests.fair.periodic")


def test_a_periodic_task_without_a_key_joins_the_unkeyed_turn_of_a_fair_queue(r, prefix):
    @task(name="tests.fair.periodic_plain", schedule=60)
    def periodic_plain(payload: Any) -> None:
        _record({"k": "-"})

    try:
        dispatch(job, {"k": "B", "n": 0})
        runner = PeriodicRunner(get_store().streams, with_rows=False)
        runner.load(T0 + 5_000)
        runner.run_due(T0 + 60_000)
        assert r.zcard(f"{prefix}:{{default}}:delayed") == 1  # due at once, to its turn
        get_store().streams.promote_due("default", T0 + 60_000, 10)
        assert r.lrange(keys.fair_ring_key(prefix, "default"), 0, -1) == [b"B", b""]
    finally:
        unregister_task("tests.fair.periodic_plain")


def test_a_server_that_lost_its_scripts_still_takes_and_feeds_fair_tasks(r, prefix):
    r.script_flush()  # a restarted server: the next calls load the scripts again
    dispatch_many(job, [{"k": "S", "n": n} for n in range(3)])
    r.script_flush()

    with worker_thread(concurrency=1):
        wait_for(lambda: started == ["S", "S", "S"], timeout=30)


@task(name="tests.fair.plain")
def plain(payload: dict) -> None:
    _record({"k": "-"})


def _held_behind(order: list[str], mine: str, other: str) -> list[int]:
    """For each of `mine`'s starts, how many of `other` started before it."""
    return [order[:at].count(other) for at, key in enumerate(order) if key == mine]


def test_tasks_without_a_key_form_one_more_turn_beside_a_key(r, prefix):
    dispatch(job, {"k": "B", "n": 0})  # a keyed task makes the queue fair
    dispatch_many(plain, [{"n": n} for n in range(1_000)])
    dispatch_many(job, [{"k": "B", "n": n} for n in range(1, 10)])

    assert r.llen(f"{prefix}:{{default}}:fair:") == 1_000  # the unkeyed turn's list
    assert not r.exists(keys.stream_key(prefix, "default"))
    with worker_thread(concurrency=1, batch_size=1):
        wait_for(lambda: started.count("B") == 10, timeout=120)
    with lock:
        order = list(started)
    assert max(behind - n for n, behind in enumerate(_held_behind(order, "B", "-"))) <= 1


def test_a_burst_of_one_key_does_not_hold_back_tasks_without_a_key(r, prefix):
    dispatch_many(job, [{"k": "B", "n": n} for n in range(1_000)])
    dispatch_many(plain, [{"n": n} for n in range(10)])

    assert not r.exists(keys.stream_key(prefix, "default"))
    with worker_thread(concurrency=1, batch_size=1):
        wait_for(lambda: started.count("-") == 10, timeout=120)
    with lock:
        order = list(started)
    assert max(behind - n for n, behind in enumerate(_held_behind(order, "-", "B"))) <= 1


def test_a_queue_that_never_saw_a_key_sends_its_tasks_straight_to_the_stream(r, prefix):
    dispatch_many(plain, [{"n": n} for n in range(5)])
    dispatch(plain, {"n": 5})

    assert r.xlen(keys.stream_key(prefix, "default")) == 6
    assert not r.keys(f"{prefix}:*fair*")


def test_a_process_that_makes_a_queue_fair_sends_its_unkeyed_tasks_to_the_turn_at_once(
        r, prefix):
    dispatch(plain, {"n": 0})  # looked at the mark: not a fair queue (for 2 s)
    dispatch(job, {"k": "B", "n": 0})
    dispatch(plain, {"n": 1})

    assert r.xlen(keys.stream_key(prefix, "default")) == 1
    assert r.llen(f"{prefix}:{{default}}:fair:") == 1


@task(name="tests.fair.unique_plain", unique=True, unique_for=60,
      unique_key=lambda payload: str(payload["n"]))
def unique_plain(payload: dict) -> None:
    _record({"k": "-"})


def test_unique_tasks_without_a_key_join_the_unkeyed_turn_of_a_fair_queue(r, prefix):
    dispatch(job, {"k": "B", "n": 0})
    dispatch(unique_plain, {"n": 0})
    dispatch_many(unique_plain, [{"n": n} for n in range(1, 4)])

    assert not r.exists(keys.stream_key(prefix, "default"))  # due at once, to their turn
    get_store().streams.promote_due("default", app_now_ms(), 10)
    assert r.llen(f"{prefix}:{{default}}:fair:") == 4
    with worker_thread(concurrency=1):
        wait_for(lambda: sorted(started) == ["-"] * 4 + ["B"], timeout=30)


def test_a_due_task_without_a_key_joins_the_unkeyed_turn_of_a_fair_queue(r, prefix):
    dispatch(job, {"k": "B", "n": 0})
    dispatch_delayed(plain, {"n": 0}, delay=0.05)
    wait_for(lambda: r.zrangebyscore(f"{prefix}:{{default}}:delayed", 0, app_now_ms()))
    get_store().streams.promote_due("default", app_now_ms(), 10)

    assert r.lrange(keys.fair_ring_key(prefix, "default"), 0, -1) == [b"B", b""]
    assert r.llen(f"{prefix}:{{default}}:fair:") == 1


failed_once: set[int] = set()


@task(name="tests.fair.flaky", fair_key=lambda payload: payload["k"], max_retry=1,
      retry_backoff=0)
def flaky(payload: dict) -> None:
    _record(payload)
    with lock:
        first = payload["n"] not in failed_once
        failed_once.add(payload["n"])
    if first:
        raise RuntimeError("the first attempt fails")


OTHERS = [f"o{n}" for n in range(20)]


def _between_the_as(order: list[str]) -> set[str]:
    """The keys that started between the first two starts of key A."""
    first = order.index("A")
    return set(order[first + 1:order.index("A", first + 1)])


def test_a_retry_without_backoff_joins_the_end_of_its_keys_turn(r, prefix):
    failed_once.clear()
    dispatch(flaky, {"k": "A", "n": 0})
    for key in OTHERS:
        dispatch_many(job, [{"k": key, "n": n} for n in range(2)])

    with worker_thread(concurrency=1, batch_size=1, prefetch_ms=0):
        wait_for(lambda: len(started) == 42, timeout=60)
    assert _between_the_as(started) == set(OTHERS)  # every other key's turn came first


def test_a_workflow_member_joins_its_keys_turn(r, prefix):
    if get_store().records.clustered:
        pytest.skip("workflows need a single Redis server")
    chain(job.s({"k": "A", "n": 0}), job.s({"k": "A", "n": 1})).dispatch()
    for key in OTHERS:
        dispatch_many(job, [{"k": key, "n": n} for n in range(2)])

    with worker_thread(concurrency=1, batch_size=1, prefetch_ms=0):
        wait_for(lambda: len(started) == 42, timeout=60)
    assert _between_the_as(started) == set(OTHERS)  # every other key's turn came first


@task(name="tests.fair.flaky_plain", max_retry=1, retry_backoff=0)
def flaky_plain(payload: dict) -> None:
    flaky({"k": "A", "n": payload["n"]})  # started as "A", fails its first attempt


def test_a_retry_without_a_key_joins_the_unkeyed_turn_of_a_fair_queue(r, prefix):
    failed_once.clear()
    for key in OTHERS:
        dispatch_many(job, [{"k": key, "n": n} for n in range(2)])
    dispatch(flaky_plain, {"n": 0})

    with worker_thread(concurrency=1, batch_size=1, prefetch_ms=0):
        wait_for(lambda: len(started) == 42, timeout=60)
    assert _between_the_as(started) == set(OTHERS)  # every other key's turn came first
