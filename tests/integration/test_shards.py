"""SHARDS: a queue split into streams `{<queue>#i}`. Dispatch spreads plain tasks round
robin and keeps a unique task's lock beside its message; workers drain every shard
exactly once; delayed sets, retries, failures, stats and the delayed admin follow.

These run on one Redis here and again on the Redis Cluster (tests/cluster/).
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from django_taskrunner import (
    InvalidTaskOptions,
    TaskAlreadyDispatched,
    TaskIdConflict,
    dispatch,
    dispatch_delayed,
    dispatch_many,
    get_stats,
)
from django_taskrunner.core.sharding import shard_for, shards
from django_taskrunner.models import DelayedTask, FailedTask
from django_taskrunner.store import get_store, keys
from tests.django.admin_helpers import page_module
from tests.integration.scheduling_helpers import wait_for
from tests.internals import holder_value
from tests.testapp.tasks import (
    always_fails,
    context_queue,
    fails_twice,
    noop,
    runs_key,
    unique_order,
)
from tests.worker_helpers import MovableClock

pytestmark = pytest.mark.django_db(transaction=True)

HOT = ["hot#0", "hot#1", "hot#2", "hot#3"]


@pytest.fixture(autouse=True)
def four_shards(taskrunner_settings):
    taskrunner_settings(SHARDS={"hot": 4})


def stream_lengths(r, prefix: str, names: list[str]) -> list[int]:
    return [r.xlen(keys.stream_key(prefix, name)) for name in names]


def run_counts(r, task: str) -> Counter[str]:
    return Counter({k.decode().split(":", 1)[1]: int(v) for k, v in r.hgetall(runs_key()).items()
                    if k.decode().startswith(task + ":")})


def test_a_split_queue_has_one_stream_per_shard_and_plain_dispatches_go_round_robin(r, prefix):
    for n in range(200):
        dispatch(noop, {"n": n}, queue="hot")
    dispatch_many(noop, [{"n": n} for n in range(200, 400)], queue="hot")

    assert shards("hot") == HOT
    assert stream_lengths(r, prefix, HOT) == [100, 100, 100, 100]
    assert not r.exists(keys.stream_key(prefix, "hot"))
    # a queue not named in SHARDS keeps its one stream under its old key name
    dispatch(noop, {"n": 0})
    assert r.xlen(f"{prefix}:{{default}}:stream") == 1


def test_a_unique_task_keeps_its_lock_in_the_shard_of_its_message(r, prefix):
    messages = [dispatch(unique_order, {"order": f"o-{n}"}, queue="hot")
                for n in range(40)]

    used = set()
    for message in messages:
        order = message.payload["order"]
        shard = shard_for("hot", f"tests.testapp.tasks.unique_order\x00{order}")
        assert message.lock_key == (f"{prefix}:{{{shard}}}:unique:"
                                    f"tests.testapp.tasks.unique_order:{order}")
        assert r.get(message.lock_key).decode() == holder_value(message)
        stream = [json.loads(fields[b"m"])["id"] for _id, fields in
                  r.xrange(keys.stream_key(prefix, shard))]
        assert message.id in stream
        used.add(shard)
    assert used == set(HOT)  # 40 keys spread over the 4 shards

    with pytest.raises(TaskAlreadyDispatched) as caught:
        dispatch(unique_order, {"order": "o-7"}, queue="hot")
    assert caught.value.holder_id == messages[7].id
    assert sum(stream_lengths(r, prefix, HOT)) == 40


def test_a_task_id_is_reserved_in_one_shard_and_a_second_dispatch_meets_it(r, prefix):
    first = dispatch(noop, {"n": 1}, queue="hot", task_id="job-42")
    with pytest.raises(TaskIdConflict):
        dispatch(noop, {"n": 2}, queue="hot", task_id="job-42")

    shard = shard_for("hot", "job-42")
    assert r.get(f"{prefix}:{{{shard}}}:id:job-42").decode() == holder_value(first)
    assert sum(stream_lengths(r, prefix, HOT)) == 1


def test_unique_with_a_task_id_is_refused_on_a_split_queue_and_nothing_is_written(r, prefix):
    with pytest.raises(InvalidTaskOptions, match="split into shards"):
        dispatch(unique_order, {"order": "x"}, queue="hot",
                 task_id="job-1")
    assert list(r.scan_iter(match=f"{prefix}:*")) == []


def test_two_worker_processes_drain_every_shard_and_run_each_task_exactly_once(
        r, prefix, spawn_worker):
    for n in range(600):
        dispatch(noop, {"n": n}, queue="hot")
    assert min(stream_lengths(r, prefix, HOT)) == 150

    env = {"TASKRUNNER_TEST_SETTINGS": json.dumps({"SHARDS": {"hot": 4}})}
    workers = [spawn_worker("--queue", "hot", "--burst", "--concurrency", "4", **env)
               for _ in range(2)]
    for worker in workers:
        assert worker.wait(60) == 0, worker.stdout.read().decode() if worker.stdout else ""

    counts = run_counts(r, "noop")
    assert len(counts) == 600
    assert set(counts.values()) == {1}
    assert stream_lengths(r, prefix, HOT) == [0, 0, 0, 0]
    stats = get_stats("hot")
    assert (stats.length, stats.runs, stats.succeeded) == (0, 600, 600)


def test_stats_add_up_the_shards(r):
    for n in range(10):
        dispatch(noop, {"n": n}, queue="hot")
    stats = get_stats("hot")
    assert (stats.length, stats.waiting, stats.pending) == (10, 10, 0)
    assert stats.oldest_wait is not None and stats.oldest_wait >= 0


def test_delayed_tasks_wait_in_their_shard_and_run_once_when_due(
    r, prefix, run_burst, monkeypatch
):
    for n in range(8):
        dispatch_delayed(noop, {"n": n}, delay=0.3, queue="hot")
    assert [r.zcard(keys.delayed_key(prefix, name)) for name in HOT] == [2, 2, 2, 2]
    assert len(page_module(DelayedTask).DelayedSet(get_store().streams, "hot")) == 8

    MovableClock.install(monkeypatch).advance(0.35)
    run_burst("--queue", "hot")

    assert set(run_counts(r, "noop").values()) == {1}
    assert len(run_counts(r, "noop")) == 8
    assert [r.zcard(keys.delayed_key(prefix, name)) for name in HOT] == [0, 0, 0, 0]


def test_the_delayed_admin_view_merges_the_shards_by_due_time_and_finds_each_entry(r):
    for n in range(12):
        dispatch_delayed(noop, {"n": n}, delay=60 + n, queue="hot")
    view = page_module(DelayedTask).DelayedSet(get_store().streams, "hot")

    page = view[3:9]
    assert [entry.message.payload["n"] for entry in page] == [3, 4, 5, 6, 7, 8]
    assert all(entry.queue == "hot" for entry in page)
    counts = page_module(DelayedTask).queues_with_counts(get_store().streams, ["hot"])
    assert counts == [("hot", 12)]

    taken = page_module(DelayedTask).take(get_store().streams, "hot", page[0].ref, run=True)
    assert taken is not None and taken.payload == {"n": 3}
    assert len(view) == 11
    assert page_module(DelayedTask).take(get_store().streams, "hot", page[0].ref, run=True) is None


def test_a_retry_stays_in_its_shard_and_a_failure_row_names_the_queue(r, prefix, run_burst):
    dispatch(fails_twice, {"n": 1}, queue="hot")
    dispatch(always_fails, {"n": 2}, queue="hot")

    run_burst("--queue", "hot")

    assert run_counts(r, "fails_twice") == Counter({"1": 3})
    assert run_counts(r, "always_fails") == Counter({"2": 3})
    row = FailedTask.objects.get()
    assert row.queue == "hot"
    report = page_module(FailedTask).RetryReport()
    # the admin's retry dispatches to the queue again
    page_module(FailedTask).retry_rows([row], report)
    assert report.retried == 1
    assert sum(stream_lengths(r, prefix, HOT)) == 1


def test_a_task_context_names_the_queue_not_the_shard(r, run_burst):
    dispatch(context_queue, {"n": 5}, queue="hot")
    run_burst("--queue", "hot")
    wait_for(lambda: r.hget(runs_key(), "context_queue:5"), 5)
    assert r.hget(runs_key(), "context_queue:5") == b"hot"
    assert keys.queue_of("hot#3") == "hot"
