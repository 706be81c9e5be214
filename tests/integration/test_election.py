"""Leader election: one holder at a time, renew and resign only by the holder, callbacks on
change, and hand-over when the leader dies (a real `runtasks` killed with SIGKILL)."""

from __future__ import annotations

import signal
import threading
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from django_taskrunner import LeaderElection
from django_taskrunner.store import get_store, keys
from tests.integration.scheduling_helpers import wait_for
from tests.testapp.tasks import stamp, stamps_key
from tests.worker_helpers import app_monotonic, exit_code_of, new_worker


@pytest.fixture
def lease_key(prefix: str) -> str:
    return keys.leader_key(prefix, "group")


def test_only_one_of_two_candidates_takes_the_lease(r, lease_key):
    a = LeaderElection(r, lease_key, lease=5, identity="a")
    b = LeaderElection(r, lease_key, lease=5, identity="b")

    assert a.try_acquire() is True
    assert b.try_acquire() is False
    assert a.holder() == "a"
    assert 0 < r.pttl(lease_key) <= 5000


def test_renew_and_resign_work_for_the_holder_only(r, lease_key):
    a = LeaderElection(r, lease_key, lease=5, identity="a")
    b = LeaderElection(r, lease_key, lease=5, identity="b")
    a.try_acquire()
    r.pexpire(lease_key, 1000)

    assert b.renew() is False
    assert b.resign() is False
    assert r.get(lease_key) == b"a"  # b could neither extend nor delete a's lease

    assert a.renew() is True
    assert r.pttl(lease_key) > 4000
    assert a.resign() is True
    assert r.get(lease_key) is None
    assert b.try_acquire() is True


def renewals(r, lease_key: str, count: int) -> None:
    """Wait until the lease's time to live has been put back up `count` times."""
    seen = {"renewals": 0, "ttl": r.pttl(lease_key)}

    def renewed() -> bool:
        ttl = r.pttl(lease_key)
        if ttl > seen["ttl"]:
            seen["renewals"] += 1
        seen["ttl"] = ttl
        return seen["renewals"] >= count

    wait_for(renewed, 10, 0.02)


def test_callbacks_fire_on_promote_and_demote_and_a_resignation_hands_over(r, lease_key):
    events: list[str] = []
    # A 2 s lease renewed every 0.67 s: a loses it only if stalled for 1.3 s. b polls
    # often, so it takes a resigned lease at once, and needs at least 1.3 s otherwise.
    a = LeaderElection(r, lease_key, lease=2, identity="a",
                       on_promote=lambda: events.append("a+"),
                       on_demote=lambda: events.append("a-"))
    b = LeaderElection(r, lease_key, lease=2, identity="b", poll_interval=0.02,
                       on_promote=lambda: events.append("b+"))
    a.start()
    assert a.wait_for_leadership(2)
    b.start()
    try:
        renewals(r, lease_key, 2)  # a keeps the lease while b polls for it
        assert a.is_leader and not b.is_leader
        assert events == ["a+"]

        a.stop()  # demotes and resigns
        assert b.wait_for_leadership(1)  # well before a's lease would have run out
        wait_for(lambda: events == ["a+", "a-", "b+"], 5)
    finally:
        a.stop()
        b.stop()


def test_a_leader_whose_lease_was_taken_steps_down(r, lease_key):
    demoted = threading.Event()
    a = LeaderElection(r, lease_key, lease=1, identity="a", on_demote=demoted.set)
    a.start()
    try:
        assert a.wait_for_leadership(2)
        r.set(lease_key, "usurper", px=5000)  # as if a had paused past its lease
        assert demoted.wait(2)
        assert not a.is_leader
        assert r.get(lease_key) == b"usurper"
    finally:
        a.stop()
    assert r.get(lease_key) == b"usurper"  # stopping did not delete the other's lease


def test_a_leader_that_cannot_reach_redis_stops_leading_when_its_lease_runs_out(lease_key):
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.1,
                       retry=Retry(NoBackoff(), 0))
    a = LeaderElection(dead, lease_key, lease=1, identity="a")
    a._leading.set()  # as if it had led before Redis went away
    a._valid_until = app_monotonic() + 30

    a.step()
    assert a.is_leader  # still within the lease it last extended

    a._valid_until = app_monotonic()  # that lease has now run out
    a.step()
    assert not a.is_leader


@pytest.mark.parametrize("spoil", ["another type", "no expiry"])
def test_a_lease_key_that_holds_no_lease_heals_and_a_leader_steps_down_from_it(
        r, lease_key, spoil, caplog):
    """A lease key overwritten with another type (the leader's renewal meets WRONGTYPE)
    or left without expiry: the leader steps down instead of its thread dying, the key is
    set to expire, and a process leads again once it is gone."""
    demoted = threading.Event()
    a = LeaderElection(r, lease_key, lease=1, identity="a", poll_interval=0.05,
                       on_demote=demoted.set)
    a.start()
    try:
        assert a.wait_for_leadership(2)
        r.delete(lease_key)
        if spoil == "another type":
            r.hset(lease_key, "holder", "someone")
        else:
            r.set(lease_key, "a-lease-without-expiry")
        assert demoted.wait(5)  # its renewal failed: stepped down, its thread alive
        wait_for(lambda: r.pttl(lease_key) > 0, 5, 0.02)  # healing: it expires by itself
        wait_for(lambda: r.type(lease_key) == b"string" and r.get(lease_key) == b"a", 10, 0.05)
        assert a._thread is not None and a._thread.is_alive()
        assert a.is_leader
    finally:
        a.stop()
    assert f"lease key {lease_key} holds no lease" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_a_leader_thread_that_dies_takes_the_worker_down_non_zero(r, monkeypatch, caplog):
    """The election and the scheduler's threads are watched as the worker's own are."""

    def broken(self):  # a bug in the election's loop
        raise RuntimeError("a bug in the election")

    monkeypatch.setattr(LeaderElection, "step", broken)
    worker = new_worker(
        ("default",), concurrency=1, block_ms=100, shutdown_timeout=5)
    code = exit_code_of(worker)
    assert code is not None, "the worker went on without its election"
    assert code == 70
    assert "internal thread taskrunner-election died unexpectedly" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_killing_the_leader_hands_the_lease_over_and_delayed_tasks_still_run(r, spawn_worker):
    broker = get_store().streams
    lease_key = keys.leader_key(broker.prefix, broker.group)
    lease = {"TASKRUNNER_TEST_SETTINGS": '{"LEADER_LEASE": 1}'}
    leader = spawn_worker("--consumer-name", "worker-a", "--concurrency", "2", **lease)
    wait_for(lambda: (r.get(lease_key) or b"").startswith(b"worker-a"), 20, 0.05)
    spawn_worker("--consumer-name", "worker-b", "--concurrency", "2", **lease)
    # b is up (its heartbeat is written; its election starts a few steps later)
    wait_for(lambda: r.exists(keys.worker_key(broker.prefix, "worker-b")), 20, 0.05)
    assert (r.get(lease_key) or b"").startswith(b"worker-a")

    # Given tasks due after the leader is gone
    for n in range(20):
        stamp.dispatch_delayed({"n": n}, delay=1.5 + n * 0.05)

    # When the leader is killed without a chance to resign
    leader.send_signal(signal.SIGKILL)
    leader.wait(5)
    killed_at = time.monotonic()

    # Then the other worker takes the lease within about one lease period
    wait_for(lambda: (r.get(lease_key) or b"").startswith(b"worker-b"), 10, 0.01)
    took_over_after = time.monotonic() - killed_at
    print(f"lease taken over {took_over_after:.3f} s after the kill")
    # A 1 s lease, polled every 0.25 s, plus room for a machine busy with other test runs;
    # a worker that did not take over would keep failing the wait above (10 s).
    assert took_over_after < 6, took_over_after

    # And every delayed task runs, once
    wait_for(lambda: all(r.llen(f"{stamps_key()}:{n}") for n in range(20)), 15)
    # a wrong second promotion would show by the time a later delayed task has run
    stamp.dispatch_delayed({"n": "marker"}, delay=0.05)
    wait_for(lambda: r.llen(f"{stamps_key()}:marker"), 15)
    assert [r.llen(f"{stamps_key()}:{n}") for n in range(20)] == [1] * 20


def test_leader_lease_setting_is_checked():
    from django_taskrunner.conf import validate_settings

    assert validate_settings({"LEADER_LEASE": 3}) == []
    (error,) = validate_settings({"LEADER_LEASE": 0.2})
    assert error.id == "taskrunner.E002" and "LEADER_LEASE" in error.msg
    assert validate_settings({"LEADER_LEASE": "10"})
