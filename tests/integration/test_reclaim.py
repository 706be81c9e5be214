"""Messages held by a dead worker are reclaimed after their reservation timeout, each
with its own timeout; a message whose runs keep killing their worker stops; dead
consumers leave the group."""

from __future__ import annotations

import time

import pytest

from django_taskrunner import dispatch
from django_taskrunner.models import FailedTask
from django_taskrunner.store import get_store
from django_taskrunner.store.streams import Entry
from django_taskrunner.worker.outage import RedisStatus
from django_taskrunner.worker.reclaim import Reclaimer, reclaim_interval, shortest_timeout
from tests.testapp.tasks import noop, patient, runs_key, sleeper
from tests.worker_helpers import MovableClock, age_pending, wait_for, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)


def runs(r, name: str) -> dict[str, int]:
    counts = r.hgetall(runs_key())
    return {k.decode().split(":", 1)[1]: int(v) for k, v in counts.items()
            if k.decode().startswith(name + ":")}


def read_as(r, consumer: str, count: int = 100, queue: str = "default") -> list[str]:
    """Deliver messages to `consumer`, a worker that then dies without acking them."""
    broker = get_store().streams
    broker.ensure_group(queue)
    reply = r.xreadgroup(broker.group, consumer, {broker.stream(queue): ">"}, count=count)
    return [stream_id.decode() for stream_id, _fields in reply[0][1]] if reply else []


def age(r, seconds: float, queue: str = "default", holder: str | None = None) -> None:
    """The pending entries of `queue` (of `holder`, if given) have been idle `seconds`: their
    holder died that long ago."""
    broker = get_store().streams
    assert age_pending(r, broker.stream(queue), broker.group, seconds, holder)


def pending_rows(r, queue: str = "default") -> list[dict]:
    broker = get_store().streams
    return r.xpending_range(broker.stream(queue), broker.group, "-", "+", 100)


class FakeBuffer:
    """Stands in for the worker's buffer: records what was handed to it."""

    def __init__(self) -> None:
        self.accepted: list[tuple[str, list[Entry], dict[str, int] | None]] = []

    def accept(self, queue: str, entries: list[Entry], runs: dict[str, int] | None = None) -> None:
        self.accepted.append((queue, entries, runs))

    def holds(self, queue: str, stream_id: str) -> bool:
        return False


def reclaimer(buffer: FakeBuffer, *, timeout: float, consumer: str = "me",
              dead_after: float = 3600) -> Reclaimer:
    return Reclaimer(get_store().streams, consumer, ["default"], buffer,
                     reservation_timeout=timeout, dead_consumer_timeout=dead_after,
                     status=RedisStatus())


def test_a_message_left_in_a_dead_workers_buffer_runs_once_after_the_timeout(
    r, taskrunner_settings
):
    # Given a worker that took a message (max_retry=0) and died before starting it
    taskrunner_settings(RESERVATION_TIMEOUT=30)
    noop.dispatch({"n": 1})
    [held_id] = read_as(r, "dead-worker")
    age(r, 20)

    with worker_thread():
        # When a live worker runs (it ran a marker dispatched after), the message is not
        # taken before its timeout: a fixed wait of a few reclaim passes (0.4 s apart, the
        # shortest timeout on the queue is 4 s) gives a wrong claim room to show
        noop.dispatch({"n": 2})
        wait_for(lambda: runs(r, "noop") == {"2": 1})
        time.sleep(0.5)
        assert runs(r, "noop") == {"2": 1}
        holders = {row["message_id"].decode(): row["consumer"] for row in pending_rows(r)}
        assert holders[held_id] == b"dead-worker"
        # ...and is run once the timeout has passed
        age(r, 31, holder="dead-worker")  # not the marker, if its ack is still on the way
        wait_for(lambda: runs(r, "noop") == {"1": 1, "2": 1}, timeout=10)
        wait_for(lambda: not pending_rows(r))

    # Then it ran exactly once, and a death before the start was not held against it
    assert runs(r, "noop") == {"1": 1, "2": 1}
    assert FailedTask.objects.count() == 0
    assert get_store().streams.length("default") == 0


def test_a_task_with_a_longer_reservation_timeout_waits_for_its_own(r, taskrunner_settings):
    # Given RESERVATION_TIMEOUT=1 and a task declared with reservation_timeout=4
    taskrunner_settings(RESERVATION_TIMEOUT=1)
    message = patient.dispatch({"n": 1})
    assert message.reservation_timeout_ms == 4000
    noop.dispatch({"n": 1})
    [patient_id, _noop_id] = read_as(r, "dead-worker")
    age(r, 2)

    with worker_thread():
        # When a live worker reclaims: the default-timeout message goes first, and the
        # patient one, idle for 2 of its 4 seconds, stays with its holder (a claim is atomic)
        wait_for(lambda: runs(r, "noop") == {"1": 1}, timeout=10)
        holders = {row["message_id"].decode(): row["consumer"] for row in pending_rows(r)}
        assert holders[patient_id] == b"dead-worker"
        assert runs(r, "patient") == {}
        # and the patient one only after its own 4 seconds
        age(r, 4.1, holder="dead-worker")
        wait_for(lambda: runs(r, "patient") == {"1": 1}, timeout=10)


def test_a_message_whose_reclaimed_run_died_too_is_recorded_failed_not_run(
    r, taskrunner_settings
):
    # Given a max_retry=0 message whose first worker died, and whose reclaimed run
    # died too (its delivery counter says 2 runs may have started)
    taskrunner_settings(RESERVATION_TIMEOUT=1)
    message = noop.dispatch({"n": 1})
    [stream_id] = read_as(r, "first-worker")
    broker = get_store().streams
    r.xclaim(broker.stream("default"), broker.group, "second-worker", 0, [stream_id],
             retrycount=2, idle=1100)

    with worker_thread():
        row = wait_for(lambda: FailedTask.objects.filter(message_id=message.id).first())
        wait_for(lambda: not pending_rows(r))

    # Then it is not run a third time: it is a failed task, with a clear error
    assert runs(r, "noop") == {}
    assert row.error_class == "django_taskrunner.exceptions.WorkerLost"
    assert "delivered 2 times" in row.error and "died" in row.error
    assert row.attempts == 2


def test_starting_a_reclaimed_message_counts_the_run_in_its_delivery_counter(
    r, taskrunner_settings
):
    taskrunner_settings(RESERVATION_TIMEOUT=1)
    sleeper.dispatch({"n": 1, "seconds": 1.5})
    read_as(r, "dead-worker")
    age(r, 1.1)

    with worker_thread(consumer="live-worker"):
        # While the reclaimed message runs here, it is held by us and counted as run twice
        wait_for(lambda: [row for row in pending_rows(r) if row["consumer"] == b"live-worker"
                          and row["times_delivered"] == 2], timeout=10)
        wait_for(lambda: runs(r, "sleeper") == {"1": 1}, timeout=10)
    assert pending_rows(r) == []


def test_reclaim_takes_no_more_than_the_buffer_has_room_for(r, taskrunner_settings):
    for n in range(5):
        noop.dispatch({"n": n})
    ids = read_as(r, "dead-worker")
    age(r, 1.1)

    buffer = FakeBuffer()
    claimed = reclaimer(buffer, timeout=1).reclaim("default", room=2)

    assert claimed == 2
    [(queue, entries, counters)] = buffer.accepted
    assert [stream_id for stream_id, _body in entries] == ids[:2]
    assert counters == {ids[0]: 1, ids[1]: 1}
    owners = {row["message_id"].decode(): row["consumer"] for row in pending_rows(r)}
    assert owners == {**dict.fromkeys(ids[:2], b"me"), **dict.fromkeys(ids[2:], b"dead-worker")}


def test_a_reclaim_pass_that_fills_the_room_leaves_the_next_one_due_at_once(r, monkeypatch):
    moved = MovableClock.install(monkeypatch)
    for n in range(3):
        noop.dispatch({"n": n})
    read_as(r, "dead-worker")
    claimer = reclaimer(FakeBuffer(), timeout=1)
    age(r, 1.1)
    moved.advance(claimer.interval)  # the first pass is due

    # The first pass fills the room; more may wait, so the next pass is due at once
    assert claimer.reclaim_due("default", room=2) == 2
    assert claimer.reclaim_due("default", room=2) == 1
    assert pending_rows(r) and {row["consumer"] for row in pending_rows(r)} == {b"me"}


def test_right_after_a_redis_outage_reclaim_waits_one_timeout(r, monkeypatch):
    # Given an idle message of a dead worker, seen just after Redis came back
    moved = MovableClock.install(monkeypatch)
    noop.dispatch({"n": 1})
    read_as(r, "dead-worker")
    age(r, 1.1)
    buffer = FakeBuffer()
    claimer = reclaimer(buffer, timeout=1)
    claimer.status.failed(ConnectionError("refused"), "testing")
    assert claimer.reclaim("default", room=10) == 0  # still down
    claimer.status.succeeded()

    # Then live workers get one timeout to renew their heartbeats before anything is taken
    assert claimer.reclaim("default", room=10) == 0
    moved.advance(1.05)
    assert claimer.reclaim("default", room=10) == 1


def test_messages_with_a_longer_timeout_do_not_block_the_ones_behind_them(r):
    # Given two messages with a 4 s timeout ahead of two with the default 1 s, all idle 1 s
    for n in range(2):
        patient.dispatch({"n": n})
    for n in range(2):
        noop.dispatch({"n": n})
    ids = read_as(r, "dead-worker")
    age(r, 1.1)
    buffer = FakeBuffer()
    claimer = reclaimer(buffer, timeout=1)

    # When the reclaimer, with room for two, makes passes
    assert claimer.reclaim("default", room=2) == 0  # the patient ones are not due
    assert claimer.reclaim("default", room=2) == 2  # the pass goes on past them

    # Then the two due ones were taken, the patient ones left to their holder
    assert [sid for _queue, entries, _runs in buffer.accepted for sid, _body in entries] == ids[2:]


def test_a_message_not_yet_idle_for_its_timeout_is_left_alone(r):
    noop.dispatch({"n": 1})
    read_as(r, "slow-worker")

    buffer = FakeBuffer()
    assert reclaimer(buffer, timeout=5).reclaim("default", room=10) == 0
    assert buffer.accepted == []
    assert pending_rows(r)[0]["consumer"] == b"slow-worker"


def test_an_entry_deleted_while_pending_is_acked_by_the_reclaimer(r):
    noop.dispatch({"n": 1})
    [stream_id] = read_as(r, "dead-worker")
    r.xdel(get_store().streams.stream("default"), stream_id)
    age(r, 1.1)

    buffer = FakeBuffer()
    assert reclaimer(buffer, timeout=1).reclaim("default", room=10) == 0
    assert pending_rows(r) == []


def test_a_worker_restarted_under_the_same_name_takes_back_its_messages_at_once(
    r, run_burst
):
    # Given a worker named w1 that held three messages when it was killed
    for n in range(3):
        noop.dispatch({"n": n})
    read_as(r, "w1")

    # When w1 starts again (the reservation timeout is 300 s)
    run_burst("--consumer-name", "w1")

    # Then it runs them at once
    assert runs(r, "noop") == {"0": 1, "1": 1, "2": 1}
    assert pending_rows(r) == []


def test_a_leftover_is_taken_back_once_though_it_ran_before_its_ack_was_sent(r):
    # Given three messages w1 held when it was killed
    for n in range(3):
        noop.dispatch({"n": n})
    read_as(r, "me")
    # When the restarted w1 takes them back, and they run and leave its buffer (FakeBuffer
    # holds nothing) while their acks are still on the way
    buffer = FakeBuffer()
    claimer = reclaimer(buffer, timeout=300)
    assert claimer.take_back_own("default", room=10) == 3

    # Then the next call of the start-up loop does not take them back a second time
    assert claimer.take_back_own("default", room=10) == 0
    assert len(buffer.accepted) == 1


def consumer_idle_ms(r, name: str) -> int:
    broker = get_store().streams
    return next(c["idle"] for c in r.xinfo_consumers(broker.stream("default"), broker.group)
                if c["name"] == name.encode())


def test_dead_consumers_holding_nothing_are_removed_from_the_group(r):
    broker = get_store().streams
    noop.dispatch({"n": 1})
    noop.dispatch({"n": 2})
    [done] = read_as(r, "finished-worker", count=1)
    r.xack(broker.stream("default"), broker.group, done)
    read_as(r, "busy-worker", count=1)
    # Redis measures a consumer's idle time and no command sets it: wait until it says so
    wait_for(lambda: consumer_idle_ms(r, "finished-worker") >= 500)
    r.xgroup_createconsumer(broker.stream("default"), broker.group, "fresh-worker")

    reclaimer(FakeBuffer(), timeout=1, dead_after=0.5).sweep("default")

    names = {c["name"] for c in r.xinfo_consumers(broker.stream("default"), broker.group)}
    assert names == {b"busy-worker", b"fresh-worker"}


def test_the_reclaim_period_is_a_tenth_of_the_shortest_timeout_within_bounds(
    taskrunner_settings,
):
    taskrunner_settings(RESERVATION_TIMEOUT=300)
    assert shortest_timeout("default", 300) == 4  # tests.testapp.tasks.patient
    assert shortest_timeout("other", 300) == 300
    assert reclaim_interval(300) == 30
    assert reclaim_interval(4) == pytest.approx(0.4)
    assert reclaim_interval(0.5) == 0.1
    assert reclaim_interval(3600) == 30


def test_dispatch_puts_the_tasks_reservation_timeout_on_the_wire(r):
    message = dispatch(patient, {"n": 1})
    body = r.xrange(get_store().streams.stream("default"))[0][1][b"m"]
    assert b'"rt":4000' in body
    assert noop.dispatch({"n": 1}).reservation_timeout_ms is None
    assert message.reservation_timeout_ms == 4000


OVERFLOWING = [
    b'{"v": 1, "id": "o1", "task": "tests.testapp.tasks.noop", "rt": 1e400}',
    b'{"v": 1, "id": "o2", "task": "tests.testapp.tasks.noop", "attempt": 1e400}',
    b'{"v": 1, "id": "o3", "task": "tests.testapp.tasks.noop", "payload": '
    + b"[" * 988 + b"]" * 988 + b"}",
    b'{"v": 1, "id": "o4", "task": "tests.testapp.tasks.noop", "lock": 5}',
]


def test_entries_that_cannot_be_decoded_never_stop_a_reclaim_pass(r):
    # Given a dead worker holding good messages with entries of bug 8 among them
    stream = get_store().streams.stream("default")
    noop.dispatch({"n": 0})
    for raw in OVERFLOWING:
        r.xadd(stream, {"m": raw})
        noop.dispatch({"n": len(raw)})
    ids = read_as(r, "dead-worker")
    age(r, 1.1)

    # When a live worker makes a reclaim pass
    buffer = FakeBuffer()
    claimed = reclaimer(buffer, timeout=1).reclaim("default", room=100)

    # Then it takes every entry, the bad ones too, with the default timeout (before:
    # OverflowError/RecursionError on each pass, and nothing was ever reclaimed)
    assert claimed == len(ids) == 9
    [(_queue, entries, _runs)] = buffer.accepted
    assert [stream_id for stream_id, _body in entries] == ids


def test_a_dead_workers_messages_are_recovered_past_an_entry_that_cannot_be_decoded(
    r, taskrunner_settings
):
    # Given the repro of bug 8: a dead worker held good tasks and undecodable entries
    taskrunner_settings(RESERVATION_TIMEOUT=1)
    stream = get_store().streams.stream("default")
    for n in range(4):
        noop.dispatch({"n": n})
        r.xadd(stream, {"m": OVERFLOWING[n]})
    read_as(r, "dead-worker")
    age(r, 1.1)

    # When a live worker runs
    with worker_thread():
        wait_for(lambda: runs(r, "noop") == {"0": 1, "1": 1, "2": 1, "3": 1}, timeout=10)
        wait_for(lambda: FailedTask.objects.count() == 4 and not pending_rows(r))

    # Then every good task ran once and each bad entry is one failed row
    assert {row.error_class for row in FailedTask.objects.all()} == {
        "django_taskrunner.exceptions.InvalidTaskPayload"}
    assert get_store().streams.length("default") == 0
