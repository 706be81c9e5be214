"""Unique tasks against a real Redis and worker: the seed scenarios, and when each mode
frees its lock (start, success, failure for good, expiry, never)."""

from __future__ import annotations

import logging

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from django_taskrunner import TaskAlreadyDispatched, TaskMessage, dispatch
from django_taskrunner.core import unique as locks
from django_taskrunner.models import FailedTask
from django_taskrunner.store import Store, get_store
from tests.internals import holder_value
from tests.testapp.tasks import noop, runs_key, unique_order
from tests.worker_helpers import MovableClock, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

PROBE = "tests.testapp.tasks.unique_probe"


def probes(r, k: str) -> dict[int, str]:
    """attempt -> what the task saw when it tried to dispatch its own duplicate."""
    found = {}
    for field, value in r.hgetall(runs_key()).items():
        name = field.decode()
        if name.startswith(f"probe:{k}:"):
            found[int(name.rsplit(":", 1)[1])] = value.decode()
    return found


def inner_runs(r, k: str) -> int:
    return int(r.hget(runs_key(), f"unique_probe:inner:{k}") or 0)


def test_seed_scenarios_duplicate_refused_other_key_free_and_free_again_after_finish(
    r, run_burst, prefix
):
    # Given order-123 dispatched once
    first = unique_order.dispatch({"order": "order-123"})
    lock_key = f"{prefix}:{{default}}:unique:tests.testapp.tasks.unique_order:order-123"
    assert first.lock_key == lock_key
    assert r.get(lock_key).decode() == holder_value(first)

    # When order-123 is dispatched again, it is refused with the first task's id
    with pytest.raises(TaskAlreadyDispatched) as refused:
        dispatch(unique_order, {"order": "order-123"})
    assert refused.value.holder_id == first.id
    assert refused.value.lock_key == lock_key

    # And order-456 is independent
    other = unique_order.dispatch({"order": "order-456"})
    assert other.id != first.id
    assert get_store().streams.length("default") == 2  # the refused one added nothing

    # Then after the first finishes, order-123 is accepted again
    run_burst("--queue", "default")
    assert r.hget(runs_key(), "unique_order:order-123") == b"1"
    assert r.exists(lock_key) == 0
    again = unique_order.dispatch({"order": "order-123"})
    assert r.get(lock_key).decode() == holder_value(again)


def test_lock_ttl_is_unique_for_and_a_per_call_override_wins(r):
    declared = unique_order.dispatch({"order": "ttl-1"})
    overridden = unique_order.dispatch({"order": "ttl-2"}, unique_for=5)

    assert 59_000 < r.pttl(declared.lock_key) <= 60_000
    assert 4_000 < r.pttl(overridden.lock_key) <= 5_000


def test_the_same_key_on_two_queues_is_two_locks(r):
    on_default = unique_order.dispatch({"order": "q-1"})
    on_other = unique_order.dispatch({"order": "q-1"}, queue="other")

    assert on_default.lock_key != on_other.lock_key
    assert "{other}" in on_other.lock_key
    assert r.get(on_default.lock_key).decode() == holder_value(on_default)
    assert r.get(on_other.lock_key).decode() == holder_value(on_other)
    with pytest.raises(TaskAlreadyDispatched):
        unique_order.dispatch({"order": "q-1"}, queue="other")


def test_an_override_makes_a_plain_task_unique_for_one_call(r):
    first = dispatch(noop, {"n": 1}, unique_key="nightly", unique_for=30)
    with pytest.raises(TaskAlreadyDispatched) as refused:
        dispatch(noop, {"n": 2}, unique_key="nightly", unique_for=30)
    plain = dispatch(noop, {"n": 3})

    assert refused.value.holder_id == first.id
    assert plain.lock_key is None
    assert get_store().streams.length("default") == 2


# -- until_finished (the default) ----------------------------------------------------------


def test_until_finished_keeps_the_lock_across_retries_and_frees_it_on_success(r, run_burst):
    message = dispatch(PROBE, {"k": "uf-retry", "fail": 2})  # fails twice, then succeeds

    run_burst()

    # Each of the three attempts found its own lock still held by itself
    assert probes(r, "uf-retry") == {1: f"held:{message.id}", 2: f"held:{message.id}",
                                     3: f"held:{message.id}"}
    assert inner_runs(r, "uf-retry") == 0
    assert r.exists(message.lock_key) == 0
    assert FailedTask.objects.count() == 0


def test_until_finished_frees_the_lock_when_the_task_fails_for_good(r, run_burst):
    message = dispatch(PROBE, {"k": "uf-fail", "fail": 99})

    run_burst()

    assert probes(r, "uf-fail") == {n: f"held:{message.id}" for n in (1, 2, 3)}
    assert FailedTask.objects.get().message_id == message.id
    assert r.exists(message.lock_key) == 0
    dispatch(PROBE, {"k": "uf-fail"})  # free again


# -- until_executed -------------------------------------------------------------------------


def test_until_executed_frees_the_lock_on_success(r, run_burst):
    message = dispatch(PROBE, {"k": "ue-ok", "fail": 1}, unique_mode="until_executed")
    assert message.unique_mode == "until_executed"

    run_burst()

    assert probes(r, "ue-ok") == {1: f"held:{message.id}", 2: f"held:{message.id}"}
    assert r.exists(message.lock_key) == 0


def test_until_executed_keeps_the_lock_when_the_task_fails_for_good(r, run_burst):
    message = dispatch(PROBE, {"k": "ue-fail", "fail": 99}, unique_mode="until_executed")

    run_burst()

    assert FailedTask.objects.get().message_id == message.id
    assert r.get(message.lock_key).decode() == holder_value(message)
    assert 0 < r.pttl(message.lock_key) <= 60_000
    with pytest.raises(TaskAlreadyDispatched) as refused:
        dispatch(PROBE, {"k": "ue-fail"})
    assert refused.value.holder_id == message.id


# -- until_executing ------------------------------------------------------------------------


def test_until_executing_frees_the_lock_when_a_worker_starts_the_task(r, run_burst):
    message = dispatch(PROBE, {"k": "ux"}, unique_mode="until_executing")
    assert r.get(message.lock_key).decode() == holder_value(message)  # held while pending

    run_burst()

    # While it ran, its duplicate was accepted, and that duplicate ran too
    seen = probes(r, "ux")
    assert list(seen) == [1]
    assert seen[1].startswith("ok:")
    assert seen[1] != f"ok:{message.id}"
    assert inner_runs(r, "ux") == 1


def test_until_executing_lock_is_free_during_every_retry(r, run_burst):
    message = dispatch(PROBE, {"k": "ux-retry", "fail": 1}, unique_mode="until_executing")

    run_burst()

    seen = probes(r, "ux-retry")
    # Attempt 1 freed the lock at its start, so its duplicate went in; by attempt 2 that
    # duplicate (mode until_finished, declared on the task) may hold it, never message 1.
    assert seen[1].startswith("ok:")
    assert seen[2] != f"held:{message.id}"
    assert inner_runs(r, "ux-retry") >= 1


# -- while_locked ---------------------------------------------------------------------------


def test_while_locked_keeps_the_lock_after_success_until_the_ttl(r, run_burst):
    message = dispatch(PROBE, {"k": "wl"}, unique_mode="while_locked", unique_for=2)

    run_burst()

    assert probes(r, "wl") == {1: f"held:{message.id}"}
    assert r.get(message.lock_key).decode() == holder_value(message)
    assert 0 < r.pttl(message.lock_key) <= 2_000
    with pytest.raises(TaskAlreadyDispatched):
        dispatch(PROBE, {"k": "wl"})


# -- only the holder frees ------------------------------------------------------------------


def test_a_lock_that_expired_and_was_retaken_survives_the_older_tasks_release(r, run_burst):
    # Given task A whose lock expired (a real TTL, shortened) while A was still queued
    older = dispatch(PROBE, {"k": "retaken"})
    r.pexpire(older.lock_key, 1)
    wait_for(lambda: r.exists(older.lock_key) == 0)
    # And task B that took the lock afterwards
    newer = dispatch(PROBE, {"k": "retaken"})
    assert r.get(newer.lock_key).decode() == holder_value(newer)

    # When a worker runs only A (B is moved aside) and A releases at its finish
    stream = get_store().streams.stream("default")
    entries = r.xrange(stream)
    newer_entry = next(entry for entry in entries if newer.id.encode() in entry[1][b"m"])
    r.xdel(stream, newer_entry[0])
    run_burst()

    # Then B still holds its lock with its TTL
    assert probes(r, "retaken") == {1: f"held:{newer.id}"}
    assert r.get(newer.lock_key).decode() == holder_value(newer)
    assert r.pttl(newer.lock_key) > 50_000


def test_an_expired_task_frees_its_lock_but_while_locked_keeps_it(r, run_burst, monkeypatch):
    until_finished = dispatch(PROBE, {"k": "exp-1"}, expires=0.001)
    while_locked = dispatch(PROBE, {"k": "exp-2"}, expires=0.001, unique_mode="while_locked")
    MovableClock.install(monkeypatch).advance(0.01)

    run_burst()

    assert probes(r, "exp-1") == {} and probes(r, "exp-2") == {}  # neither ran
    assert FailedTask.objects.count() == 2
    assert r.exists(until_finished.lock_key) == 0
    assert r.get(while_locked.lock_key).decode() == holder_value(while_locked)


def test_a_message_for_an_unknown_task_frees_its_lock(r, run_burst, prefix):
    # A message written by a newer release (its task is unknown here) holding a lock
    lock_key = f"{prefix}:{{default}}:unique:shop.tasks.gone:1"
    r.set(lock_key, "m-1", px=60_000)
    body = ('{"v":1,"id":"m-1","task":"shop.tasks.gone","queue":"default","payload":1,'
            f'"lock":"{lock_key}","mode":"until_finished"}}')
    r.xadd(get_store().streams.stream("default"), {"m": body})

    run_burst()

    assert FailedTask.objects.get().error_class == "django_taskrunner.exceptions.TaskNotFound"
    assert r.exists(lock_key) == 0


def test_a_release_that_finds_the_lock_gone_or_taken_or_redis_down_logs_and_goes_on(
    r, prefix, caplog, monkeypatch
):
    caplog.set_level(logging.DEBUG, logger="django_taskrunner.core.unique")
    gone = TaskMessage(id="m-gone", task_name="t", queue="default", payload=None,
                       lock_key=f"{prefix}:{{default}}:unique:t:a", unique_mode="until_finished")
    taken = TaskMessage(id="m-old", task_name="t", queue="default", payload=None,
                        lock_key=f"{prefix}:{{default}}:unique:t:b", unique_mode="until_finished")
    r.set(taken.lock_key, "m-new", px=60_000)

    locks.release(Store(r, prefix), gone, locks.SUCCEEDED)
    locks.release(Store(r, prefix), taken, locks.SUCCEEDED)

    assert r.get(taken.lock_key) == b"m-new"
    logged = {rec.levelname: rec.getMessage() for rec in caplog.records}
    assert "already gone" in logged["DEBUG"]
    assert "now held by m-new" in logged["INFO"]

    # Redis unreachable: retried briefly, then logged; the lock frees at its TTL
    monkeypatch.setattr(locks, "RELEASE_RETRY_PAUSES", (0.01, None))
    unreachable = redis.Redis(port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    locks.release(Store(unreachable, prefix), taken, locks.SUCCEEDED)
    assert "Redis is unreachable" in caplog.records[-1].getMessage()
    assert caplog.records[-1].levelname == "ERROR"
