"""Priorities: `priority=0..9` on a task or a dispatch; within a queue a higher one is
read first (one stream per level in use, in the queue's or shard's slot). Backlogs,
shards, delayed messages, retries, reclaim, unique locks across levels, purge and the
admin's Tasks page."""

from __future__ import annotations

import json
import threading

import pytest

from django_taskrunner import dispatch, dispatch_delayed, dispatch_many, task
from django_taskrunner.store import get_store, keys
from django_taskrunner.worker import fetcher
from tests.worker_helpers import MovableClock, age_pending, wait_for, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)

started: list[str] = []
lock = threading.Lock()


@task(name="tests.prio.step")
def step(payload: dict) -> None:
    with lock:
        started.append(payload["n"])


@task(name="tests.prio.urgent", priority=9)
def urgent(payload: dict) -> None:
    with lock:
        started.append(payload["n"])


@task(name="tests.prio.unique_step", unique=True, unique_for=60,
      unique_key=lambda payload: payload["k"])
def unique_step(payload: dict) -> None:
    with lock:
        started.append(payload["k"])


@pytest.fixture(autouse=True)
def clear_started():
    started.clear()
    yield
    started.clear()


def test_high_priority_overtakes_a_backlog_of_low(r, prefix):
    dispatch_many(step, [{"n": f"low-{n}"} for n in range(200)], priority=1)
    for n in range(5):
        dispatch(step, {"n": f"high-{n}"}, priority=8)

    assert r.xlen(keys.stream_key(prefix, "default!1")) == 200
    assert r.xlen(keys.stream_key(prefix, "default!8")) == 5
    assert not r.exists(keys.stream_key(prefix, "default"))
    with worker_thread(concurrency=1):
        wait_for(lambda: len(started) == 205)
    assert started[:5] == [f"high-{n}" for n in range(5)]
    assert started[5:] == [f"low-{n}" for n in range(200)]


def test_a_level_that_comes_into_use_while_the_worker_runs_is_read_first(
        r, prefix, monkeypatch):
    moved = MovableClock.install(monkeypatch)
    release = threading.Event()

    @task(name="tests.prio.gate")
    def gate(payload: dict) -> None:
        with lock:
            started.append("gate")
        release.wait(10)

    dispatch(gate)
    dispatch_many(step, [{"n": f"low-{n}"} for n in range(200)])
    with worker_thread(concurrency=1, batch_size=5):
        wait_for(lambda: "gate" in started)
        for n in range(5):
            urgent.dispatch({"n": f"high-{n}"})  # the task's own priority, 9
        wait_for(lambda: r.exists(keys.stream_key(prefix, "default!9")))
        moved.advance(fetcher.LEVELS_EVERY)  # the fetcher's next look for levels is due
        release.set()
        wait_for(lambda: len(started) == 206)
    first = started.index("high-0")
    assert started[first:first + 5] == [f"high-{n}" for n in range(5)]
    # only what was in the buffer ran before them: the gate and one batch
    assert first <= 1 + 5


def test_the_default_priority_stays_on_the_queue_stream(r, prefix):
    dispatch(step, {"n": "a"}, priority=5)
    dispatch(step, {"n": "b"})
    assert r.xlen(keys.stream_key(prefix, "default")) == 2
    assert not [key for key in r.scan_iter(f"{prefix}:*stream!*")]


def test_priorities_on_a_sharded_queue(r, prefix, taskrunner_settings):
    taskrunner_settings(SHARDS={"hot": 2})
    for n in range(40):
        dispatch(step, {"n": f"low-{n}"}, queue="hot", priority=0)
    for n in range(4):
        dispatch(step, {"n": f"high-{n}"}, queue="hot", priority=9)
    assert {r.xlen(keys.stream_key(prefix, f"hot#{i}!9")) for i in range(2)} == {2}
    assert {r.xlen(keys.stream_key(prefix, f"hot#{i}!0")) for i in range(2)} == {20}
    shard_of = {json.loads(fields[b"m"])["payload"]["n"]: i for i in range(2)
                for level in (0, 9)
                for _id, fields in r.xrange(keys.stream_key(prefix, f"hot#{i}!{level}"))}
    with worker_thread(("hot",), concurrency=1, batch_size=2):
        wait_for(lambda: len(started) == 44)
    # one fetcher per shard, each reading its own highs first
    for i in range(2):
        order = [n for n in started if shard_of[n] == i]
        assert sorted(order[:2]) == sorted(n for n in shard_of if shard_of[n] == i
                                           and n.startswith("high"))


def test_a_delayed_message_keeps_its_priority(r, prefix):
    message = dispatch_delayed(step, {"n": "later"}, delay=0.2, priority=7)
    assert r.zcard(keys.delayed_key(prefix, "default!7")) == 1
    with worker_thread(concurrency=1):
        wait_for(lambda: started == ["later"])
    assert message.priority == 7


def test_a_unique_lock_is_met_across_levels(r, prefix):
    from django_taskrunner import TaskAlreadyDispatched

    first = dispatch(unique_step, {"k": "x"}, priority=9)
    with pytest.raises(TaskAlreadyDispatched):
        dispatch(unique_step, {"k": "x"}, priority=1)
    with pytest.raises(TaskAlreadyDispatched):
        dispatch(unique_step, {"k": "x"})
    assert first.lock_key == f"{prefix}:{{default}}:unique:tests.prio.unique_step:x"
    with worker_thread(concurrency=1):
        wait_for(lambda: started == ["x"])
    wait_for(lambda: not r.exists(first.lock_key))


def test_a_dead_workers_message_on_a_level_is_reclaimed(r, prefix):
    dispatch(step, {"n": "orphan"}, priority=9)
    broker = get_store().streams
    broker.ensure_group("default!9")
    stream = broker.stream("default!9")
    assert r.xreadgroup(broker.group, "dead-one", {stream: ">"}, count=10)
    age_pending(r, stream, broker.group, 3600)
    with worker_thread(concurrency=1, reservation_timeout=2):
        wait_for(lambda: started == ["orphan"])
        wait_for(lambda: not r.xpending(stream, broker.group)["pending"])


def test_a_failed_attempt_retries_on_its_level(r, prefix):
    runs: list[int] = []

    @task(name="tests.prio.flaky", max_retry=1, retry_backoff=0)
    def flaky(payload: dict) -> None:
        runs.append(1)
        if len(runs) == 1:
            raise RuntimeError("first time")

    dispatch(flaky, priority=2)
    with worker_thread(concurrency=1) as worker:
        wait_for(lambda: len(runs) == 2)
        wait_for(lambda: worker.outstanding == 0)
        wait_for(lambda: r.xlen(keys.stream_key(prefix, "default!2")) == 0)  # acked
    assert runs == [1, 1]
    assert r.xlen(keys.stream_key(prefix, "default")) == 0


def test_queues_given_in_order_are_read_strictly_in_that_order(r):
    dispatch_many(step, [{"n": f"b-{n}"} for n in range(20)], queue="b")
    dispatch_many(step, [{"n": f"a-{n}"} for n in range(20)], queue="a")
    with worker_thread(("a", "b"), concurrency=1, batch_size=2,
                       queue_order=(("a", 0), ("b", 0))):
        wait_for(lambda: len(started) == 40)
    assert started == [f"a-{n}" for n in range(20)] + [f"b-{n}" for n in range(20)]


@pytest.mark.parametrize("priority", [None, 7])  # one stream, or a level's stream too
@pytest.mark.parametrize("earlier", [4, 5])  # its last read full, or short of its count
def test_a_later_strict_queue_is_read_once_the_earlier_one_runs_dry_not_a_block_later(
        r, priority, earlier):
    # BLOCK_MS 3 s: before, the read that found "a" empty blocked that long before "b"
    # could be read; now the read after a full one does not block (all 8 run in well
    # under a second; the 2 s wait is the margin for a loaded machine).
    dispatch_many(step, [{"n": f"b-{n}"} for n in range(4)], queue="b")
    dispatch_many(step, [{"n": f"a-{n}"} for n in range(earlier)], queue="a",
                  priority=priority)
    with worker_thread(("a", "b"), concurrency=1, batch_size=2, prefetch_ms=0,
                       block_ms=3000, queue_order=(("a", 0), ("b", 0))):
        wait_for(lambda: len(started) == earlier + 4, timeout=2)
    assert started == [f"a-{n}" for n in range(earlier)] + [f"b-{n}" for n in range(4)]


def test_weighted_queues_are_read_in_a_weighted_round_robin(r):
    dispatch_many(step, [{"n": f"a-{n}"} for n in range(60)], queue="a")
    dispatch_many(step, [{"n": f"b-{n}"} for n in range(60)], queue="b")
    with worker_thread(("a", "b"), concurrency=1, batch_size=1,
                       queue_order=(("a", 3), ("b", 1))):
        wait_for(lambda: len(started) == 120)
    # every read takes one message: each round of four reads is three of a, one of b
    first = started[:40]
    assert sum(n.startswith("a-") for n in first) == 30
    assert [n for n in started if n.startswith("a-")] == [f"a-{n}" for n in range(60)]
