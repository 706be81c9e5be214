"""A dead worker's messages, handed back at once: fetched ones to a live sibling (or the
queue), the running one as a failed attempt; and the leader's watch for lost workers."""

from __future__ import annotations

import time

import pytest

from django_taskrunner.models import FailedTask
from django_taskrunner.store import get_store, keys
from django_taskrunner.worker.lost_workers import LostWorkerWatch
from django_taskrunner.worker.reclaim import Started, hand_back
from tests.testapp.tasks import noop
from tests.worker_helpers import app_monotonic, app_now_ms

pytestmark = pytest.mark.django_db(transaction=True)


def read_as(r, consumer: str, count: int = 100) -> list[str]:
    broker = get_store().streams
    broker.ensure_group("default")
    reply = r.xreadgroup(broker.group, consumer, {broker.stream("default"): ">"}, count=count)
    return [stream_id.decode() for stream_id, _fields in reply[0][1]] if reply else []


def pending_of(r, consumer: str) -> list[dict]:
    broker = get_store().streams
    return r.xpending_range(broker.stream("default"), broker.group, "-", "+", 100,
                            consumername=consumer)


def test_fetched_messages_go_to_a_sibling_keeping_their_place_and_the_running_one_fails(r):
    # Given a dead child that fetched three messages and was running the first
    for n in range(3):
        noop.dispatch({"n": n})
    ids = read_as(r, "dead-1.0")
    running = {("default", ids[0]): Started("default", ids[0], app_monotonic() - 1)}
    # When its messages are handed back, with a live sibling
    done = hand_back(get_store().streams, "dead-1.0", ["default"], running,
                     "killed by signal 11 (SIGSEGV)", ["alive-0.0"])
    # Then the two it had not started belong to the sibling, delivered once still
    assert done.adopted == {"alive-0.0": {"default": [(ids[1], 1), (ids[2], 1)]}}
    assert [(row["message_id"].decode(), row["times_delivered"])
            for row in pending_of(r, "alive-0.0")] == [(ids[1], 1), (ids[2], 1)]
    assert pending_of(r, "dead-1.0") == []
    consumers = [row["name"].decode()
                 for row in r.xinfo_consumers(get_store().streams.stream("default"),
                                                    get_store().group)]
    assert "dead-1.0" not in consumers and "alive-0.0" in consumers
    # and the running one (max_retry=0) failed for good, naming the signal
    [row] = FailedTask.objects.all()
    assert "WorkerLost" in row.error and "SIGSEGV" in row.error and row.attempts == 1
    assert done.failed_attempts == 1 and done.requeued == 0


def test_without_a_sibling_fetched_messages_go_back_to_the_end_of_the_queue(r):
    for n in range(2):
        noop.dispatch({"n": n})
    ids = read_as(r, "dead-1.0")
    done = hand_back(get_store().streams, "dead-1.0", ["default"], {}, "exited with code 1")
    assert done.requeued == 2 and pending_of(r, "dead-1.0") == []
    entries = r.xrange(get_store().streams.stream("default"))
    assert len(entries) == 2 and all(entry[0].decode() > ids[-1] for entry in entries)
    # a second hand-back finds nothing left to do
    assert hand_back(get_store().streams, "dead-1.0", ["default"], {}, "again").requeued == 0


def ghost_beside(r, other: str) -> None:
    """Two queued tasks, one held by "ghost" (no heartbeat), one by `other`."""
    noop.dispatch({"n": 1})
    noop.dispatch({"n": 2})
    read_as(r, "ghost", count=1)
    read_as(r, other, count=1)


def test_the_leader_hands_back_a_silent_worker_without_heartbeat_not_a_beating_one(r):
    broker = get_store().streams
    ghost_beside(r, "busy")
    # "busy" runs a long task: it reads nothing, but its heartbeat is fresh
    watch = LostWorkerWatch(broker, ["default"], lost_after=1)
    deadline = time.monotonic() + 30
    lost: list[str] = []
    while not lost and time.monotonic() < deadline:
        r.hset(keys.worker_key(broker.prefix, "busy"), "seen", app_now_ms())
        lost = watch.check()
        time.sleep(0.2)
    assert lost == ["ghost"]
    assert pending_of(r, "ghost") == [] and len(pending_of(r, "busy")) == 1
    assert r.xlen(broker.stream("default")) == 2  # the busy one's, and the ghost's again


def test_a_worker_whose_clock_is_an_hour_behind_the_leaders_is_not_taken_for_lost(r):
    from django_taskrunner.store.stats import WorkerBeat

    broker, stats = get_store().streams, get_store().stats
    ghost_beside(r, "busy")
    # "busy" runs a long task on a host whose clock is an hour behind: its heartbeats
    # say they were written an hour ago
    behind_ms = app_now_ms() - 3_600_000
    watch = LostWorkerWatch(broker, ["default"], lost_after=1)
    deadline = time.monotonic() + 30
    lost: list[str] = []
    while not lost and time.monotonic() < deadline:
        stats.write_figures([], WorkerBeat("busy", ["default"], {"seen": str(behind_ms)}),
                            now_ms=behind_ms, window=10, ttl=30)
        lost = watch.check()
        time.sleep(0.2)
    assert lost == ["ghost"]
    assert pending_of(r, "ghost") == [] and len(pending_of(r, "busy")) == 1


def test_a_worker_with_an_unreadable_heartbeat_is_not_taken_for_lost_nor_stops_the_watch(r):
    broker = get_store().streams
    ghost_beside(r, "garbled")
    r.set(keys.worker_key(broker.prefix, "garbled"), "not a hash")
    watch = LostWorkerWatch(broker, ["default"], lost_after=1)
    deadline = time.monotonic() + 30
    lost: list[str] = []
    while not lost and time.monotonic() < deadline:
        lost = watch.check()
        time.sleep(0.2)
    assert lost == ["ghost"]
    assert len(pending_of(r, "garbled")) == 1


def test_a_running_message_with_retries_left_goes_to_a_sibling_counted_as_a_death(r):
    from tests.testapp.tasks import always_fails  # max_retry=2

    always_fails.dispatch({"n": 1})
    [stream_id] = read_as(r, "dead-1.0")
    running = {("default", stream_id): Started("default", stream_id, app_monotonic())}
    done = hand_back(get_store().streams, "dead-1.0", ["default"], running,
                     "killed by signal 9 (SIGKILL)", ["alive-0.0"])
    # its counter says one run died: the sibling's reclaimed-run check counts it
    assert done.adopted == {"alive-0.0": {"default": [(stream_id, 2)]}}
    [row] = pending_of(r, "alive-0.0")
    assert row["times_delivered"] == 2 and FailedTask.objects.count() == 0


def test_a_message_whose_runs_died_goes_back_to_its_queue_with_them_counted(r):
    # A segfaulting message's first run died in one child and it was given to a sibling
    # (its counter raised to 2), which died too before starting it, with no live sibling
    # left: it goes back to its queue as a new entry, delivered once; the run that died
    # must be counted in its attempt, else the task runs max_retry + 2 times.
    from django_taskrunner import TaskMessage
    from tests.testapp.tasks import always_fails  # max_retry=2

    always_fails.dispatch({"n": 1})
    [stream_id] = read_as(r, "dead-0.0")
    running = {("default", stream_id): Started("default", stream_id, app_monotonic())}
    hand_back(get_store().streams, "dead-0.0", ["default"], running,
              "killed by signal 11 (SIGSEGV)", ["dead-1.0"])
    done = hand_back(get_store().streams, "dead-1.0", ["default"], {},
                     "killed by signal 9 (SIGKILL)")
    assert done.requeued == 1 and pending_of(r, "dead-1.0") == []
    [(_new_id, fields)] = r.xrange(get_store().streams.stream("default"))
    assert TaskMessage.from_json(fields[b"m"]).attempt == 2
