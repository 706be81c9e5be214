"""cancel() exactly and at once, through the public names: a message no worker fetched is
deleted with its lock freed in one step; a fetched one keeps its lock until the worker
that holds it skips it (or the one that reclaims it after a crash), so no unique task
runs twice; the worker hears of the cancel on pub/sub and answers before cancel()
returns, so a fetched message it had not started never starts; the heartbeat stays the
fallback when the notice is lost."""

from __future__ import annotations

import random
import statistics
import threading
import time

import pytest

from django_taskrunner import cancel, lookup
from django_taskrunner.core import records as core_records
from django_taskrunner.models import FailedTask
from django_taskrunner.store import get_store, keys
from django_taskrunner.store.records import Records
from tests.testapp import cancel_tasks, tasks
from tests.worker_helpers import age_pending, wait_for, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)


def runs(r, name: str) -> int:
    return sum(int(v) for k, v in r.hgetall(tasks.runs_key()).items()
               if k.decode().startswith(name + ":"))


def drained(broker, queue: str = "default") -> bool:
    return broker.pending(queue) == 0 and broker.length(queue) == 0


def subscribed(worker) -> None:
    wait_for(worker.cancels.subscribed.is_set)


def needs_one_server() -> None:
    """The test kills a connection on its one server."""
    if get_store().records.clustered:
        pytest.skip("kills the connection on a single server")


@pytest.fixture(autouse=True)
def _fresh_notes():
    cancel_tasks.reset()
    yield
    cancel_tasks.reset()


def test_a_message_no_worker_fetched_is_deleted_with_its_lock_in_one_step(r, run_burst):
    broker = get_store().streams
    broker.ensure_group("default")  # a worker read the queue before: the group exists
    first = tasks.unique_records.dispatch({"n": 1})

    assert cancel(first.id) is True

    assert broker.length("default") == 0  # deleted: no worker can read it any more
    assert not r.exists(first.lock_key)  # freed at once, in the same step
    assert not r.smembers(keys.cancelled_key(broker.prefix, "default"))  # nothing to skip
    assert lookup(first.id).status == "cancelled"
    again = tasks.unique_records.dispatch({"n": 1})
    run_burst()
    assert runs(r, "unique_records") == 1 and lookup(again.id).status == "succeeded"
    assert lookup(first.id).status == "cancelled"


def test_a_fetched_message_keeps_its_lock_until_its_worker_skips_it(r):
    blocker = tasks.gated_report.dispatch({"k": "held"})
    buffered = tasks.unique_records.dispatch({"n": 7})
    broker = get_store().streams
    with worker_thread(concurrency=1, batch_size=1) as worker:
        subscribed(worker)
        wait_for(lambda: r.hget(tasks.runs_key(), "gated_report:held") == b"1"
                 and len(worker.held_messages()) == 2)

        assert cancel(buffered.id) is True

        # fetched: the lock stays with the worker holding the message, so a new dispatch
        # of the same unique task cannot run beside it
        assert r.exists(buffered.lock_key)
        assert tasks.unique_records.dispatch({"n": 7}, on_conflict="return").id == buffered.id
        assert lookup(buffered.id).status == "cancelled"
        r.set(f"{tasks.runs_key()}:gate:1", "1")
        wait_for(lambda: lookup(blocker.id).status == "succeeded" and drained(broker))
        assert not r.exists(buffered.lock_key)  # the skip freed it

    assert runs(r, "unique_records") == 0
    assert lookup(buffered.id).status == "cancelled"
    assert not r.smembers(keys.cancelled_key(broker.prefix, "default"))
    assert not FailedTask.objects.filter(message_id=buffered.id).exists()


def test_a_message_a_dead_worker_fetched_is_skipped_by_the_worker_that_reclaims_it(
    r, monkeypatch, taskrunner_settings,
):
    taskrunner_settings(RESERVATION_TIMEOUT=1)
    # A holder silent past its heartbeats is not waited for (it would never answer).
    monkeypatch.setattr(core_records, "CANCEL_ANSWER_S", 30.0)
    message = tasks.unique_records.dispatch({"n": 3})
    broker = get_store().streams
    broker.ensure_group("default")
    assert r.xreadgroup(broker.group, "dead-worker", {broker.stream("default"): ">"}, count=1)
    assert age_pending(r, broker.stream("default"), broker.group, 60) == 1

    began = time.monotonic()
    assert cancel(message.id) is True
    assert time.monotonic() - began < 10

    # the dead worker's entry still holds it
    assert r.exists(message.lock_key)
    with worker_thread() as worker:
        wait_for(lambda: drained(broker))
        assert worker.executor.cancelled.get("default") is not None
    assert runs(r, "unique_records") == 0
    assert not r.exists(message.lock_key)
    assert lookup(message.id).status == "cancelled"
    assert not FailedTask.objects.filter(message_id=message.id).exists()
    assert not r.smembers(keys.cancelled_key(broker.prefix, "default"))


def test_a_running_task_is_told_before_cancel_returns(r):
    """50 tries; run with -s for the figures (the time from cancel() to ctx.cancelled)."""
    seen, took = [], []
    with worker_thread(concurrency=1) as worker:
        subscribed(worker)
        for i in range(50):
            message = cancel_tasks.waits_for_cancel.dispatch({"i": i})
            wait_for(lambda: message.id in cancel_tasks.STARTED, step=0.001)  # noqa: B023
            attempt = next(a for a in worker.running.snapshot() if a.message.id == message.id)
            began = time.perf_counter()
            assert cancel(message.id) is True
            took.append(time.perf_counter() - began)
            assert attempt.cancel.is_set()  # told before cancel() returned
            wait_for(lambda: message.id in cancel_tasks.SEEN, step=0.001)  # noqa: B023
            seen.append(cancel_tasks.SEEN[message.id] - began)
            wait_for(lambda: lookup(message.id).status == "cancelled")  # noqa: B023
    seen.sort()
    print(f"\ncancel() -> ctx.cancelled over {len(seen)}: p50 {statistics.median(seen) * 1e3:.1f} "
          f"ms, p99 {seen[-1] * 1e3:.1f} ms; cancel() itself p50 "
          f"{statistics.median(took) * 1e3:.1f} ms")


def test_a_cancel_waits_no_longer_than_its_answer_time_for_a_silent_holder(r, monkeypatch):
    """Its holder fetched it a moment ago and then died: no answer comes."""
    monkeypatch.setattr(core_records, "CANCEL_ANSWER_S", 0.2)
    message = tasks.unique_records.dispatch({"n": 4})
    broker = get_store().streams
    broker.ensure_group("default")
    assert r.xreadgroup(broker.group, "dead-worker", {broker.stream("default"): ">"}, count=1)
    assert cancel(message.id) is True
    assert r.exists(message.lock_key)
    assert lookup(message.id).status == "cancelled"


def test_the_wait_for_an_answer_stays_under_the_socket_timeout(
    r, monkeypatch, taskrunner_settings,
):
    """A client with a short socket timeout: the cancel took effect, and says so."""
    taskrunner_settings(SOCKET_TIMEOUT=0.5, BLOCK_MS=100)
    monkeypatch.setattr(core_records, "CANCEL_ANSWER_S", 30.0)
    message = tasks.unique_records.dispatch({"n": 5})
    broker = get_store().streams
    broker.ensure_group("default")
    assert r.xreadgroup(broker.group, "dead-worker", {broker.stream("default"): ">"}, count=1)
    began = time.monotonic()
    assert cancel(message.id) is True
    assert time.monotonic() - began < 10
    assert lookup(message.id).status == "cancelled"


def test_a_running_task_still_sees_the_cancel_when_the_notice_is_lost(r, monkeypatch):
    monkeypatch.setattr(core_records, "CANCEL_ANSWER_S", 0.1)
    with worker_thread(concurrency=1) as worker:
        subscribed(worker)
        worker.cancels.stop()  # as if its pub/sub connection were down
        message = cancel_tasks.waits_for_cancel.dispatch({"i": "lost"})
        wait_for(lambda: message.id in cancel_tasks.STARTED)
        began = time.perf_counter()
        assert cancel(message.id) is True
        wait_for(lambda: message.id in cancel_tasks.SEEN, timeout=5)
        assert lookup(message.id) is not None
        record = wait_for(lambda: (rec := lookup(message.id)).finished and rec)
    assert record.status == "cancelled"
    assert cancel_tasks.SEEN[message.id] - began < 3  # the heartbeat's read: within a second


def test_the_listener_subscribes_again_after_its_connection_drops(r):
    channel = keys.cancel_channel(get_store().prefix)
    with worker_thread(concurrency=1) as worker:
        subscribed(worker)
        needs_one_server()
        assert r.pubsub_numsub(channel) == [(channel.encode(), 1)]
        r.client_kill_filter(_type="pubsub")
        wait_for(lambda: r.pubsub_numsub(channel) == [(channel.encode(), 1)]
                 and worker.cancels.subscribed.is_set())

        message = cancel_tasks.waits_for_cancel.dispatch({"i": "again"})
        wait_for(lambda: message.id in cancel_tasks.STARTED)
        attempt = next(a for a in worker.running.snapshot() if a.message.id == message.id)
        assert cancel(message.id) is True
        assert attempt.cancel.is_set()


def _cancel_and_redispatch(ids: list[tuple[str, int]], cancelled: dict[str, float],
                           redispatched: list[str], seed: int) -> None:
    """Cancel in a shuffled order, a few ms apart; after each cancel that took effect,
    dispatch the same unique task again at once (it joins the old holder while the old
    message is still fetched: no second run may go on beside it)."""
    rng = random.Random(seed)  # noqa: S311 - an order to race in, not a secret
    rng.shuffle(ids)
    for task_id, key in ids:
        time.sleep(rng.uniform(0, 0.006))
        if cancel(task_id):
            cancelled[task_id] = time.perf_counter()
            again = cancel_tasks.exact_unique.dispatch({"k": key}, on_conflict="return")
            redispatched.append(again.id)


def test_racing_cancels_never_start_a_cancelled_task_nor_a_unique_task_twice(r, monkeypatch):
    """A full buffer (2 threads held at a gate, 18 messages fetched behind them, 22 still
    in the stream) draining 40 short unique tasks once the gate opens, while another
    thread cancels them in a random order: a message whose cancel() returned True never
    starts afterwards, and no unique key runs twice at once. Five rounds."""
    broker = get_store().streams
    outcomes: list[str] = []
    entry_cancel = Records.cancel_entry

    def noted(self, *args, **kwargs):
        done = entry_cancel(self, *args, **kwargs)
        outcomes.append(done.outcome)
        return done

    monkeypatch.setattr(Records, "cancel_entry", noted)
    for round_ in range(5):
        _race_one_round(r, broker, round_)
    # the race reached both kinds: messages still in the stream, and fetched ones
    assert "removed" in outcomes and "held" in outcomes


def _race_one_round(r, broker, round_: int) -> None:
    cancel_tasks.reset()
    gate = f"{tasks.runs_key()}:gate:1"
    r.delete(gate)
    blockers = [f"{round_}-{thread}" for thread in ("a", "b")]
    for k in blockers:  # first in the stream: both threads wait at the gate
        tasks.gated_report.dispatch({"k": k})
    messages = [cancel_tasks.exact_unique.dispatch({"k": f"{round_}-{i}", "s": 0.008})
                for i in range(40)]
    with worker_thread(concurrency=2, batch_size=20) as worker:
        subscribed(worker)
        # one read of 20: the blockers run, 18 wait in the buffer (room for no more)
        wait_for(lambda: len(worker.held_messages()) == 20 and all(
            r.hget(tasks.runs_key(), f"gated_report:{k}") == b"1" for k in blockers))
        cancelled: dict[str, float] = {}
        redispatched: list[str] = []
        canceller = threading.Thread(target=_cancel_and_redispatch, args=(
            [(m.id, f"{round_}-{i}") for i, m in enumerate(messages)], cancelled,
            redispatched, round_))
        r.set(gate, "1")
        canceller.start()
        canceller.join(30)
        assert not canceller.is_alive()
        wait_for(lambda: drained(broker) and not worker.held_messages())

    late = {task_id for task_id, returned in cancelled.items()
            if cancel_tasks.STARTED.get(task_id, -1.0) > returned}
    assert not late, "started after cancel() returned True"
    assert cancel_tasks.OVERLAPS == []
    assert cancelled, "no cancel took effect: the race was not run"
    for message in messages:
        record = wait_for(lambda: (rec := lookup(message.id)).finished and rec)  # noqa: B023
        assert record.status in ("cancelled", "succeeded")
        assert not r.exists(message.lock_key)
