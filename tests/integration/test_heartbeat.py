"""While a task runs, its worker keeps the message reserved, so a task far longer than the
reservation timeout is never reclaimed while its worker lives."""

from __future__ import annotations

import time

import pytest
import redis

from django_taskrunner import TaskMessage
from django_taskrunner.store import Store, get_store
from django_taskrunner.worker.keepalive import Heartbeat, heartbeat_interval
from django_taskrunner.worker.outage import RedisStatus
from django_taskrunner.worker.running import RunningSet
from tests.testapp.tasks import beats_by_hand, noop, runs_key, short_lease, sleeper
from tests.worker_helpers import wait_for, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_task_three_times_longer_than_the_timeout_runs_once_between_two_workers(
    r, taskrunner_settings
):
    # Given a 1-second reservation timeout and two live workers
    taskrunner_settings(RESERVATION_TIMEOUT=1)
    broker = get_store().streams
    sleeper.dispatch({"n": "long", "seconds": 3})
    longest_idle = 0
    with worker_thread(consumer="worker-a"), worker_thread(consumer="worker-b"):
        # When the 3-second task runs, its message never looks idle for long
        wait_for(lambda: broker.pending("default") == 1)
        deadline = time.monotonic() + 15
        while r.hget(runs_key(), "sleeper:long") is None and time.monotonic() < deadline:
            for row in r.xpending_range(broker.stream("default"), broker.group, "-", "+", 10):
                longest_idle = max(longest_idle, row["time_since_delivered"])
                assert row["times_delivered"] == 1
            time.sleep(0.05)
        wait_for(lambda: broker.pending("default") == 0)

    # Then it ran once, and its idle time stayed well under the timeout
    assert r.hget(runs_key(), "sleeper:long") == b"1"
    assert longest_idle < 1000


def test_a_task_with_its_own_short_timeout_runs_once_between_two_idle_workers(
    r, taskrunner_settings
):
    # Given two idle workers with the default 300-second reservation timeout, and a task
    # whose own timeout is 2 seconds and which runs for 6 without calling ctx.heartbeat()
    taskrunner_settings(RESERVATION_TIMEOUT=300)
    broker = get_store().streams
    with worker_thread(("short-lease",), consumer="worker-a", concurrency=1), \
            worker_thread(("short-lease",), consumer="worker-b", concurrency=1):
        time.sleep(0.3)  # both idle, blocked in their reads
        # When it is dispatched once
        short_lease.dispatch({"n": 1, "seconds": 6})
        wait_for(lambda: r.hget(runs_key(), "short_lease:1"), timeout=30)
        wait_for(lambda: broker.pending("short-lease") == 0)

    # Then it started once: the first worker's heartbeat kept it reserved
    assert r.hget(runs_key(), "short_lease:start:1") == b"1"
    assert r.hget(runs_key(), "short_lease:1") == b"1"


def test_messages_waiting_in_a_busy_workers_buffer_are_not_taken_over(r, taskrunner_settings):
    # Given worker A, one thread, running a 5-second task with its buffer holding two more
    # of those 2-second-timeout tasks, and an idle worker B
    taskrunner_settings(RESERVATION_TIMEOUT=300)
    broker = get_store().streams
    short_lease.dispatch({"n": "long", "seconds": 5})
    short_lease.dispatch_many({"n": n, "seconds": 0.01} for n in range(2))
    with worker_thread(("short-lease",), consumer="worker-a", concurrency=1, batch_size=3):
        wait_for(lambda: broker.pending("short-lease") == 3)
        with worker_thread(("short-lease",), consumer="worker-b", concurrency=1):
            # When the buffered ones wait there for more than their timeout
            holders = set()
            while r.hget(runs_key(), "short_lease:1") is None:
                for row in r.xpending_range(broker.stream("short-lease"), broker.group, "-",
                                            "+", 10):
                    holders.add((row["consumer"], row["times_delivered"]))
                time.sleep(0.05)
            wait_for(lambda: broker.pending("short-lease") == 0)

    # Then A kept them all: B never took one over, and all three ran once
    assert holders == {(b"worker-a", 1)}
    assert {key: r.hget(runs_key(), key) for key in (
        "short_lease:start:long", "short_lease:start:0", "short_lease:start:1")} == {
        "short_lease:start:long": b"1", "short_lease:start:0": b"1",
        "short_lease:start:1": b"1"}


def test_an_attempt_with_a_shorter_timeout_than_planned_wakes_the_heartbeat(r):
    # Given a heartbeat planned for a 300-second timeout (an idle worker beats every 10 s)
    broker = get_store().streams
    noop.dispatch({"n": 1})
    broker.ensure_group("default")
    [(_stream, entries)] = r.xreadgroup(broker.group, "me", {broker.stream("default"): ">"},
                                        count=1)
    stream_id = entries[0][0].decode()
    running = RunningSet()
    beat = Heartbeat(broker, "me", running, 300.0, RedisStatus())
    beat.start()
    try:
        time.sleep(0.2)  # the heartbeat is waiting its 10 seconds
        # When an attempt whose message has a 1-second timeout starts
        running.start(noop, TaskMessage(id="x", task_name=noop.name, queue="default",
                                        payload=None, stream_id=stream_id), 1.0)
        # Then the message is beaten within its own timeout, over and over
        longest_idle = 0
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            [row] = r.xpending_range(broker.stream("default"), broker.group, "-", "+", 1)
            longest_idle = max(longest_idle, row["time_since_delivered"])
            time.sleep(0.05)
    finally:
        beat.stop()
    assert longest_idle < 1000


def test_a_heartbeat_also_holds_messages_waiting_in_the_buffer(r):
    # Given a message fetched into the buffer but not started
    broker = get_store().streams
    noop.dispatch({"n": 1})
    broker.ensure_group("default")
    [(_stream, entries)] = r.xreadgroup(broker.group, "me", {broker.stream("default"): ">"},
                                        count=1)
    stream_id = entries[0][0].decode()
    time.sleep(0.3)
    beat = Heartbeat(broker, "me", RunningSet(), 300.0, RedisStatus(),
                     held=lambda: [("default", stream_id)])

    # When the heartbeat beats
    beat.beat()

    # Then its idle time starts again
    [row] = r.xpending_range(broker.stream("default"), broker.group, "-", "+", 1)
    assert row["time_since_delivered"] < 300


def test_a_heartbeat_never_takes_back_a_message_another_worker_reclaimed(r):
    # Given a message reclaimed by worker B from worker A
    broker = get_store().streams
    noop.dispatch({"n": 1})
    broker.ensure_group("default")
    [(stream, entries)] = r.xreadgroup(broker.group, "worker-a",
                                       {broker.stream("default"): ">"}, count=1)
    stream_id = entries[0][0].decode()
    r.xclaim(broker.stream("default"), broker.group, "worker-b", 0, [stream_id])

    # When A (still running it) sends a heartbeat
    lost = broker.hold("default", "worker-a", [stream_id])

    # Then A learns it lost the message, and B keeps it
    assert lost == [stream_id]
    [row] = r.xpending_range(broker.stream("default"), broker.group, "-", "+", 10)
    assert row["consumer"] == b"worker-b"
    assert broker.heartbeat("default", "worker-b", stream_id) is True
    assert broker.heartbeat("default", "worker-a", stream_id) is False


def test_a_task_can_send_its_own_heartbeat(r, run_burst):
    beats_by_hand.dispatch({"n": 1})
    run_burst()
    assert r.hget(runs_key(), "beat:1") == b"1"


def test_heartbeats_come_several_times_per_timeout_within_bounds():
    assert heartbeat_interval(30) == 7.5
    assert heartbeat_interval(300) == 10
    assert heartbeat_interval(0.1) == 0.05


def test_a_heartbeat_against_a_dead_redis_marks_it_down_and_does_not_raise(
    taskrunner_settings,
):
    # Given a running attempt and a Redis that cannot be reached
    broker = get_store().streams
    dead = redis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    running = RunningSet()
    running.start(sleeper, TaskMessage(id="x", task_name=sleeper.name, queue="default",
                                       payload=None, stream_id="1-0"), 1.0)
    status = RedisStatus()
    beat = Heartbeat(Store(dead, broker.prefix, broker.group).streams, "me", running, 1.0, status)

    # When heartbeats are sent, they fail quietly, and the outage is noted
    beat.beat()
    beat.beat()
    assert status.down
