"""A plain dispatch's task id names its stream entry (`<stream id>@<stream>`): the
dispatch is one XADD and writes no record; `lookup()`, `wait()` and `cancel()` read the
entry until a worker records the task, and every move of the message before that (a
stop's hand-back, a paused queue's send-back, a process that ended) keeps the id and
writes the record, so the task is never unknown while it exists."""

from __future__ import annotations

import signal
import threading

import pytest

from django_taskrunner import TaskMessage, cancel, dispatch, lookup, wait
from django_taskrunner.exceptions import InvalidTaskOptions, InvalidTaskPayload
from django_taskrunner.store import get_store, keys
from django_taskrunner.worker.reclaim import hand_back
from tests.internals import stream_messages
from tests.testapp.tasks import marked_sleeper, noop, returns_double, runs_key
from tests.worker_helpers import wait_for, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)


def record_exists(r, task_id: str) -> bool:
    return bool(r.exists(keys.record_key(get_store().prefix, task_id)))


def read_as(consumer: str, queue: str = "default") -> list[tuple[str, bytes]]:
    broker = get_store().streams
    broker.ensure_group(queue)
    return [(stream_id, body) for stream_id, body in broker.read(queue, consumer, 100, None)
            if body is not None]


def test_the_id_names_the_entry_and_the_record_is_read_from_it(r):
    message = returns_double.dispatch({"n": 2})

    assert message.id == f"{message.stream_id}@default"
    assert not record_exists(r, message.id)
    record = lookup(message.id)
    assert (record.status, record.task_name, record.queue, record.attempt) == (
        "queued", returns_double.name, "default", 1)
    assert record.stream_id == message.stream_id
    assert record.dispatched_at == message.dispatched_at
    # the worker reads the message with that id
    (queued,) = stream_messages("default")
    assert queued == message


def test_a_held_entry_reads_queued_and_an_acked_one_without_a_record_is_unknown(
        r, taskrunner_settings):
    taskrunner_settings(DELETE_ON_ACK=False)
    message = noop.dispatch({"n": 1})
    ((stream_id, _body),) = read_as("someone")
    assert lookup(message.id).status == "queued"  # fetched, not started: no record yet

    broker = get_store().streams
    broker.ack("default", [stream_id])  # acked, the entry kept (DELETE_ON_ACK off)
    assert r.xlen(broker.stream("default")) == 1
    assert lookup(message.id) is None  # its record was written before the ack, or expired


def test_a_task_runs_under_its_entry_id_and_its_record_is_complete(r, run_burst):
    message = returns_double.dispatch({"n": 21})
    run_burst()

    done = lookup(message.id)
    assert (done.status, done.result, done.attempt) == ("succeeded", {"double": 42}, 1)
    assert done.task_name == returns_double.name and done.queue == "default"
    assert done.dispatched_at == message.dispatched_at
    assert done.dispatched_at <= done.started_at <= done.finished_at


def test_wait_on_a_queued_task_returns_its_final_record(r):
    message = returns_double.dispatch({"n": 5})
    waited: list = []
    waiter = threading.Thread(target=lambda: waited.append(wait(message.id, timeout=30)))
    waiter.start()
    wait_for(lambda: record_exists(r, message.id))  # wait() wrote the "queued" record
    assert lookup(message.id).status == "queued"
    with worker_thread():
        waiter.join(30)
    assert waited and waited[0].status == "succeeded" and waited[0].result == {"double": 10}


def test_cancel_of_a_queued_task_keeps_it_from_running(r, run_burst):
    message = noop.dispatch({"n": 7})
    assert cancel(message.id) is True
    assert lookup(message.id).status == "cancelled"
    assert get_store().streams.length("default") == 0  # the entry is gone

    run_burst()
    assert r.hget(runs_key(), "noop:7") is None
    assert cancel(message.id) is False  # finished


def test_cancel_of_a_fetched_task_makes_its_worker_skip_it(r):
    blocker = marked_sleeper.dispatch({"n": "blocker", "seconds": 1.5})
    buffered = noop.dispatch({"n": 8})
    with worker_thread(concurrency=1) as worker:
        wait_for(lambda: len(worker.held_messages()) == 2)
        assert cancel(buffered.id) is True
        wait_for(lambda: lookup(blocker.id).status == "succeeded"
                 and lookup(buffered.id).status == "cancelled", timeout=20)
        wait_for(lambda: get_store().streams.pending("default") == 0)
    assert r.hget(runs_key(), "noop:8") is None


def test_a_message_given_back_before_any_record_keeps_its_id_and_gets_its_record(r):
    # A process that fetched it ended before starting it (no live sibling): its message
    # goes back to the end of its queue as a new entry
    message = noop.dispatch({"n": 3})
    read_as("dead-1.0")
    done = hand_back(get_store().streams, "dead-1.0", ["default"], {}, "exited with code 1")
    assert done.requeued == 1

    (moved,) = stream_messages("default")
    assert moved.id == message.id and moved.stream_id != message.stream_id
    record = lookup(message.id)
    assert record.status == "queued" and record.task_name == noop.name
    assert cancel(message.id) is True  # still reachable by its id
    assert lookup(message.id).status == "cancelled"


def test_a_stopping_worker_hands_back_unstarted_messages_under_their_ids(r, run_burst,
                                                                         spawn_worker):
    marked_sleeper.dispatch({"n": "long", "seconds": 1.5})
    messages = [noop.dispatch({"n": n}) for n in range(4)]
    worker = spawn_worker("--queue", "default", "--concurrency", "1", "--batch-size", "5")
    wait_for(lambda: r.hget(runs_key(), "marked_sleeper:start:long"))
    worker.send_signal(signal.SIGTERM)
    output = worker.communicate(timeout=30)[0].decode()
    assert worker.returncode == 0, output

    back = {queued.id for queued in stream_messages("default")}
    unstarted = [m for m in messages if m.id in back]
    assert unstarted, output  # the worker had fetched them with the long task
    for message in unstarted:
        assert lookup(message.id).status == "queued"
    run_burst()
    for message in messages:
        assert lookup(message.id).status == "succeeded"
    assert {k.decode(): int(v) for k, v in r.hgetall(runs_key()).items()} == {
        "marked_sleeper:start:long": 1, "marked_sleeper:long": 1,
        **{f"noop:{n}": 1 for n in range(4)}}


def test_a_priority_or_a_shard_is_the_stream_the_id_names(r, run_burst, taskrunner_settings):
    high = dispatch(noop, {"n": 1}, priority=9)
    assert high.id == f"{high.stream_id}@default!9"
    assert lookup(high.id).status == "queued"
    run_burst()
    assert lookup(high.id).status == "succeeded"

    taskrunner_settings(SHARDS={"default": 2})
    spread = [noop.dispatch({"n": n}) for n in (2, 3)]
    assert {m.id.partition("@")[2] for m in spread} == {"default#0", "default#1"}
    assert all(lookup(m.id).status == "queued" for m in spread)
    run_burst()
    assert all(lookup(m.id).status == "succeeded" for m in spread)


def test_a_task_id_of_that_shape_is_refused(r):
    message = noop.dispatch({"n": 1})
    for task_id in (message.id, "1-0@default", "99999999999999-3@other#2!7"):
        with pytest.raises(InvalidTaskOptions, match="stream id"):
            noop.dispatch({"n": 2}, task_id=task_id)
    # other ids with an "@" are a caller's to choose
    assert noop.dispatch({"n": 3}, task_id="user@example.com").id == "user@example.com"


def test_without_records_a_dispatch_keeps_a_random_id(r, taskrunner_settings):
    taskrunner_settings(RESULT_TTL=0)
    message = noop.dispatch({"n": 1})
    assert "@" not in message.id and len(message.id) == 32
    assert stream_messages("default")[0].id == message.id


def test_ids_that_look_alike_but_name_nothing_are_unknown(r):
    noop.dispatch({"n": 1})
    for task_id in ("1-0@default", "1-0@nope", "1-0@", "x-0@default", "1-0@a{b}"):
        assert lookup(task_id) is None
        assert cancel(task_id) is False
        assert wait(task_id, timeout=0.5) is None


def test_an_entry_with_garbage_after_the_version_fails_once_and_stops_nothing(r, run_burst):
    broker = get_store().streams
    broker.ensure_group("default")
    r.xadd(broker.stream("default"), {"m": b'{"v":2,"task":5}'})
    r.xadd(broker.stream("default"), {"m": b'{"v":2,'})
    message = noop.dispatch({"n": 4})
    run_burst()
    assert r.hget(runs_key(), "noop:4") == b"1"
    assert lookup(message.id).status == "succeeded"
    assert broker.pending("default") == 0 and broker.length("default") == 0


def test_a_body_without_its_id_decodes_only_once_a_reader_puts_it_in(r):
    message = noop.dispatch({"n": 1})
    raw = r.xrange(get_store().streams.stream("default"))[0][1][b"m"]
    assert raw.startswith(b'{"v":2,"task":')
    with pytest.raises(InvalidTaskPayload, match="field 'id'"):
        TaskMessage.from_json(raw)
    assert stream_messages("default")[0].id == message.id


def test_the_size_limit_leaves_room_for_the_id_a_reader_puts_in(r, run_burst):
    from django_taskrunner.core.message import MESSAGE_MAX_BYTES

    broker = get_store().streams
    noop.dispatch({"n": 1, "text": ""})
    envelope = len(r.xrange(broker.stream("default"))[0][1][b"m"])  # the body, no id
    r.delete(broker.stream("default"))
    # Within the limit without its id (by 80 bytes), over it once a reader put the id
    # in: refused
    with pytest.raises(InvalidTaskPayload, match="over the limit"):
        noop.dispatch({"n": 1, "text": "x" * (MESSAGE_MAX_BYTES - 80 - envelope)})
    assert broker.length("default") == 0
    # With room to spare it is read back, and runs, within the limit
    message = noop.dispatch({"n": 2, "text": "x" * (MESSAGE_MAX_BYTES - 400)})
    (queued,) = stream_messages("default")
    assert queued.id == message.id
    run_burst()
    assert lookup(message.id).status == "succeeded"
