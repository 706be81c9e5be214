"""Task records through the public names: lookup, wait, cancel, ctx.set_progress,
RESULT_TTL and @task(result_ttl=...)."""

from __future__ import annotations

import json
import threading
import time

import pytest

from django_taskrunner import cancel, dispatch, dispatch_delayed, lookup, wait
from django_taskrunner.core.records import KEPT_MESSAGE_MAX_BYTES
from django_taskrunner.models import FailedTask
from django_taskrunner.store import get_store, keys
from tests.testapp import async_tasks, tasks
from tests.worker_helpers import MovableClock, app_now_ms, wait_for, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)


def runs(r, name: str) -> int:
    return sum(int(v) for k, v in r.hgetall(tasks.runs_key()).items()
               if k.decode().startswith(name + ":"))


def test_unknown_ids_answer_none_and_false(r):
    assert lookup("no-such-task") is None
    assert lookup("") is None
    assert lookup(None) is None  # type: ignore[arg-type]
    assert cancel("no-such-task") is False
    assert cancel(42) is False  # type: ignore[arg-type]
    assert wait("no-such-task", timeout=1) is None


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), "5", True])
def test_wait_refuses_a_timeout_that_is_not_positive_seconds(timeout):
    with pytest.raises(ValueError, match="positive number of seconds"):
        wait("any", timeout=timeout)


def test_a_dispatched_task_is_queued_then_succeeded_with_its_result(r, run_burst):
    message = tasks.returns_double.dispatch({"n": 21})

    queued = lookup(message.id)
    assert queued.status == "queued"
    assert (queued.task_name, queued.queue, queued.attempt) == (
        "tests.testapp.tasks.returns_double", "default", 1)
    assert queued.dispatched_at is not None and queued.started_at is None
    assert queued.stream_id == message.stream_id
    key = keys.record_key(get_store().prefix, message.id)
    if get_store().records.clustered:  # the record follows the XADD (record_new.lua)
        assert 6 * 86400 < r.ttl(key)
    else:  # no record: the id names the stream entry, which lookup reads
        assert message.id == f"{message.stream_id}@default" and not r.exists(key)

    run_burst()

    done = lookup(message.id)
    assert done.status == "succeeded"
    assert done.result == {"double": 42}
    assert done.error is None
    assert done.worker
    assert done.dispatched_at <= done.started_at <= done.finished_at
    # kept RESULT_TTL (a day by default) once finished
    assert 0 < r.ttl(keys.record_key(get_store().prefix, message.id)) <= 86400


def test_each_dispatched_task_gets_its_own_queued_record_with_its_stream_id(r):
    # dispatch() writes none (lookup reads the entry its id names), dispatch_many writes
    # its records with record_add.lua: each record says what its own message is, and where.
    one = tasks.returns_double.dispatch({"n": 1})
    batch = tasks.returns_double.dispatch_many([{"n": n} for n in range(3)])

    for message in [one, *batch]:
        record = lookup(message.id)
        assert (record.status, record.task_name, record.queue, record.attempt) == (
            "queued", "tests.testapp.tasks.returns_double", "default", 1)
        assert record.stream_id == message.stream_id
        assert record.dispatched_at == message.dispatched_at
    for message in batch:
        assert 6 * 86400 < r.ttl(keys.record_key(get_store().prefix, message.id))
    # a plain dispatch's id names its entry, but on a cluster, where its record follows
    assert bool(r.exists(keys.record_key(get_store().prefix, one.id))) == (
        get_store().records.clustered)
    assert len({message.stream_id for message in [one, *batch]}) == 4


def test_a_batch_of_unlike_records_gives_each_message_its_own(r):
    # record_add.lua gets each distinct record once and, per message, which is its own:
    # messages of two tasks and queues, interleaved, each keep their own fields and TTL.
    from django_taskrunner.store.records import RecordWrite

    store = get_store()
    writes = [RecordWrite(f"unlike-{n}", (("s", "queued"), ("t", task), ("q", queue)), ttl)
              for n, (task, queue, ttl) in enumerate(
                  [("a.one", "default", 500), ("b.two", "other", 900),
                   ("a.one", "default", 500), ("a.one", "default", 700)])]
    entries = [(write.fields[2][1], f"body-{write.task_id}") for write in writes]

    stream_ids = store.streams.add_each(entries, writes)

    assert len(stream_ids) == 4 and all(stream_ids)
    for write, stream_id in zip(writes, stream_ids, strict=True):
        key = keys.record_key(store.prefix, write.task_id)
        assert {k.decode(): v.decode() for k, v in r.hgetall(key).items()} == {
            **dict(write.fields), "sid": stream_id}
        assert write.ttl_s - 5 < r.ttl(key) <= write.ttl_s


def test_a_finished_record_keeps_the_stream_id_of_the_entry_it_ran_from(r, run_burst):
    """A move's own write of the new stream id rides the acker's batch and finds the
    record final when the task ended first (a fair task fed onto the stream and run at
    once): the final record carries it itself. Its task drops the id while it runs."""
    message = tasks.forgets_its_stream_id.dispatch({})
    queued = lookup(message.id)
    assert queued is not None and queued.stream_id
    run_burst()
    done = lookup(message.id)
    assert done is not None and done.status == "succeeded"
    assert done.stream_id == queued.stream_id


def test_a_finished_record_keeps_its_message_and_reads_its_last_attempt_from_its_fields(
        r, run_burst):
    """The final write keeps the entry's body ('m'), not the payload encoded again, and
    no `x:<n>` for the attempt that finished: the trace is the record's own fields."""
    message = tasks.returns_double.dispatch({"n": 4, "note": "é"})
    run_burst()
    fields = get_store().records.load(message.id)
    assert "pl" not in fields and "x:1" not in fields
    assert json.loads(fields["m"])["payload"] == {"n": 4, "note": "é"}
    done = lookup(message.id)
    assert done.payload == {"n": 4, "note": "é"}
    [trace] = done.attempts
    assert (trace.number, trace.outcome, trace.error, trace.worker) == (
        1, "succeeded", "", done.worker)
    assert trace.started_ms == int(fields["st"]) and trace.ended_ms == int(fields["f"])
    assert trace.ready_ms == int(done.stream_id.partition("-")[0])


def test_a_message_over_the_kept_size_is_run_but_not_kept_in_its_record(r, run_burst):
    message = tasks.returns_double.dispatch({"n": 1, "pad": "x" * KEPT_MESSAGE_MAX_BYTES})
    run_burst()
    done = lookup(message.id)
    assert (done.status, done.result, done.payload) == ("succeeded", {"double": 2}, None)
    assert "m" not in get_store().records.load(message.id)


def test_a_record_an_earlier_release_finished_reads_as_before(r):
    """Records finished before the upgrade hold the payload ('pl') and every attempt's
    trace (`x:<n>`); the last trace is not counted twice."""
    key = keys.record_key(get_store().prefix, "earlier-1")
    trace = '[1000, 1001, 1005, "w1", "succeeded", ""]'
    r.hset(key, mapping={"s": "succeeded", "t": "t", "q": "default", "a": "2", "w": "w1",
                         "d": "900", "st": "1001", "f": "1005", "sid": "1000-0", "r": "null",
                         "pl": '{"n": 3}', "x:1": '[950, 960, 970, "w0", "retrying", "E"]',
                         "x:2": trace})
    record = lookup("earlier-1")
    assert record.payload == {"n": 3}
    assert [(t.number, t.outcome, t.worker) for t in record.attempts] == [
        (1, "retrying", "w0"), (2, "succeeded", "w1")]


def test_wait_returns_when_the_worker_finishes(r):
    message = tasks.sleeper.dispatch({"seconds": 0.3, "n": 1})
    with worker_thread():
        record = wait(message.id, timeout=15)
    assert record.status == "succeeded"
    assert runs(r, "sleeper") == 1


def test_wait_raises_timeout_error_while_the_task_is_not_done(r):
    message = tasks.noop.dispatch({"n": 1})  # no worker runs it
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="still queued"):
        wait(message.id, timeout=0.3)
    assert time.monotonic() - started >= 0.3


def test_several_waiters_all_wake(r):
    message = tasks.sleeper.dispatch({"seconds": 0.3, "n": 2})
    found: list[str] = []

    def waiter() -> None:
        found.append(wait(message.id, timeout=15).status)

    threads = [threading.Thread(target=waiter) for _ in range(3)]
    for thread in threads:
        thread.start()
    with worker_thread():
        for thread in threads:
            thread.join(20)
    assert found == ["succeeded"] * 3


def test_a_delayed_task_is_delayed_then_queued_once_due(r, monkeypatch):
    # The app's clock moves, not the wall's: a busy machine cannot make it due early
    # (a 0.3 s delay once read "queued" at the first look on a loaded run).
    moved = MovableClock.install(monkeypatch)
    message = dispatch_delayed(tasks.noop, {"n": 1}, delay=60)
    assert lookup(message.id).status == "delayed"
    assert lookup(message.id).due_at is not None
    moved.advance(61)
    assert lookup(message.id).status == "queued"


def test_a_failing_task_is_retrying_then_failed(r, run_burst):
    message = tasks.always_fails.dispatch({"n": 1})
    later = tasks.fails_then_retries_later.dispatch({"n": 1})

    run_burst()

    failed = lookup(message.id)
    assert failed.status == "failed"
    assert failed.attempt == 3
    assert failed.error == "ValueError: boom {'n': 1}"
    assert "Traceback" in failed.traceback
    retrying = lookup(later.id)
    assert retrying.status == "retrying"
    assert retrying.attempt == 2
    assert retrying.error == "ValueError: first attempt fails"


def test_a_task_not_started_before_it_expires_is_expired(r, run_burst):
    message = dispatch(tasks.noop, {"n": 1}, expires=0.05)
    time.sleep(0.1)
    run_burst()
    assert lookup(message.id).status == "expired"
    assert runs(r, "noop") == 0


def test_a_result_json_cannot_encode_or_too_large_is_a_message_not_a_crash(r, run_burst):
    odd = tasks.returns_unencodable.dispatch({})
    huge = tasks.returns_huge.dispatch({})

    run_burst()

    odd_record, huge_record = lookup(odd.id), lookup(huge.id)
    assert odd_record.status == "succeeded" and odd_record.result is None
    assert odd_record.error.startswith("result not kept: it cannot be encoded as JSON")
    assert huge_record.status == "succeeded" and huge_record.result is None
    assert "over the 65,536-byte limit" in huge_record.error


def test_result_ttl_0_keeps_no_record(r, run_burst):
    message = tasks.keeps_no_record.dispatch({"n": 1})
    assert lookup(message.id) is None
    run_burst()
    assert runs(r, "keeps_no_record") == 1
    assert lookup(message.id) is None
    assert not r.exists(keys.record_key(get_store().prefix, message.id))


def test_the_setting_result_ttl_0_keeps_none_at_all(r, run_burst, taskrunner_settings):
    taskrunner_settings(RESULT_TTL=0)
    message = tasks.returns_double.dispatch({"n": 1})
    run_burst()
    assert lookup(message.id) is None


def test_progress_is_read_while_running_and_cancel_stops_it_within_a_second(r):
    message = tasks.runs_until_cancelled.dispatch({"n": 1})
    with worker_thread():
        running = wait_for(lambda: (rec := lookup(message.id)) and rec.status == "running"
                           and rec.progress is not None and rec)
        assert running.progress == {"step": 1, "of": 2}
        assert running.worker and running.started_at is not None

        cancelled_at = time.monotonic()
        assert cancel(message.id) is True
        record = wait(message.id, timeout=15)

    assert record.status == "cancelled"
    # ctx.cancelled turned True within a second (two on a loaded machine)
    assert tasks.CANCELLED_SEEN[message.id] - cancelled_at < 2.0
    # not retried although it raised (max_retry=2), and its lock is free
    assert runs(r, "runs_until_cancelled:start") == 1
    assert not r.exists(message.lock_key)
    assert cancel(message.id) is False  # already finished


def test_a_cancelled_queued_task_never_runs_and_frees_its_lock(r, run_burst):
    message = tasks.unique_records.dispatch({"n": 1})
    assert r.exists(message.lock_key)

    assert cancel(message.id) is True

    assert lookup(message.id).status == "cancelled"
    assert not r.exists(message.lock_key)  # freed at once: it may be dispatched again
    run_burst()
    assert runs(r, "unique_records") == 0
    assert lookup(message.id).status == "cancelled"
    broker = get_store().streams
    assert broker.length("default") == 0 and broker.pending("default") == 0
    assert not r.smembers(keys.cancelled_key(broker.prefix, "default"))
    assert cancel(message.id) is False


def test_a_cancelled_delayed_task_never_runs(r, run_burst):
    message = dispatch_delayed(tasks.unique_records, {"n": 2}, delay=0.3)
    assert cancel(message.id) is True
    assert not r.exists(message.lock_key)
    assert lookup(message.id).status == "cancelled"

    time.sleep(0.4)
    run_burst()

    assert runs(r, "unique_records") == 0
    assert lookup(message.id).status == "cancelled"


def test_a_task_id_is_freed_by_cancel_and_a_new_dispatch_gets_a_fresh_record(r, run_burst):
    first = dispatch(tasks.returns_double, {"n": 1}, task_id="report-1")
    assert cancel("report-1") is True

    again = dispatch(tasks.returns_double, {"n": 2}, task_id="report-1")
    assert again.id == first.id
    assert lookup("report-1").status == "queued"

    run_burst()

    record = lookup("report-1")
    assert record.status == "succeeded" and record.result == {"double": 4}
    assert not record.cancel_requested


def test_a_task_id_with_braces_has_both_record_keys_in_one_slot(r, run_burst):
    message = dispatch(tasks.returns_double, {"n": 3}, task_id="a}{b")
    record_key = keys.record_key(get_store().prefix, message.id)
    done_key = keys.record_done_key(get_store().prefix, message.id)
    assert keys.record_tag(message.id) in record_key and keys.record_tag(message.id) in done_key
    run_burst()
    assert wait("a}{b", timeout=5).result == {"double": 6}


def test_records_are_written_after_the_server_forgot_its_scripts(r, run_burst):
    # The acker sends record_write.lua as a bare EVALSHA (no SCRIPT EXISTS round trip);
    # a server that lost its scripts (a restart) gets them again and the batch is resent.
    warm = tasks.returns_double.dispatch({"n": 1})
    run_burst()
    assert lookup(warm.id).status == "succeeded"
    r.script_flush()
    message = tasks.returns_double.dispatch({"n": 5})

    run_burst()

    assert lookup(message.id).result == {"double": 10}
    assert get_store().streams.pending("default") == 0


def test_a_cancelled_retry_never_runs_its_next_attempt(r, run_burst):
    message = tasks.fails_then_retries_later.dispatch({"n": 9})
    run_burst()
    assert lookup(message.id).status == "retrying"

    assert cancel(message.id) is True
    assert lookup(message.id).status == "cancelled"

    # its next attempt falls due (moved now, instead of waiting the 60 s backoff)
    moved, _next = get_store().streams.promote_due("default", app_now_ms() + 120_000, 10)
    assert moved == 1
    run_burst()

    done = lookup(message.id)
    assert done.status == "cancelled"
    # one attempt ran: the start it left is not read as a second attempt's
    assert [t.outcome for t in done.attempts] == ["retrying"]
    assert not FailedTask.objects.filter(message_id=message.id).exists()
    assert get_store().streams.pending("default") == 0


def test_a_task_a_stopping_worker_puts_back_is_queued_again(r):
    message = tasks.sleeper.dispatch({"n": "slow", "seconds": 3})
    with worker_thread(concurrency=1, shutdown_timeout=0.2):
        wait_for(lambda: lookup(message.id).status == "running")
    # the worker gave up waiting for it and put it back on its stream
    record = lookup(message.id)
    assert record.status == "queued"
    assert record.worker is None
    assert get_store().streams.length("default") == 1
    # The abandoned task's thread ends inside this test: later it would write into the
    # keys of whatever test runs then (its record() reads the prefix when it runs).
    wait_for(lambda: r.hget(tasks.runs_key(), "sleeper:slow") is not None, timeout=15)


def test_an_async_task_keeps_its_result_and_is_cancelled_outright(r):
    returns = async_tasks.async_returns.dispatch({"n": 3})
    sleeps = async_tasks.async_sleeper.dispatch({"n": "long", "seconds": 30})
    with worker_thread():
        assert wait(returns.id, timeout=15).result == {"async": 3}
        wait_for(lambda: lookup(sleeps.id).status == "running")
        assert cancel(sleeps.id) is True
        # the coroutine is cancelled at the worker's next heartbeat, not after 30 s
        record = wait(sleeps.id, timeout=10)
    assert record.status == "cancelled"
    assert runs(r, "async_sleeper:start") == 1
    assert r.hget(tasks.runs_key(), "async_sleeper:long") is None  # it never finished


def test_a_message_cancelled_while_in_the_buffer_never_starts(r, monkeypatch):
    """The buffer is full (one thread running a blocker, one message fetched behind it),
    so no fetch reads the cancelled set again, and the worker missed the cancel's notice
    (its listener is stopped): the heartbeat must read the set, or the cancelled message
    starts once the blocker ends. Its lock stays held until the worker skips it."""
    from django_taskrunner.core import records as core_records
    from tests.internals import holder_value

    monkeypatch.setattr(core_records, "CANCEL_ANSWER_S", 0.1)  # no answer comes
    blocker = tasks.gated_report.dispatch({"k": "buffer"})
    buffered = tasks.unique_records.dispatch({"n": 7})
    with worker_thread(concurrency=1, batch_size=1) as worker:
        wait_for(worker.cancels.subscribed.is_set)
        worker.cancels.stop()
        wait_for(lambda: r.hget(tasks.runs_key(), "gated_report:buffer") == b"1"
                 and len(worker.held_messages()) == 2)
        assert lookup(buffered.id).status == "queued"
        # the record knows its stream entry (on a cluster too)
        assert lookup(buffered.id).stream_id == buffered.stream_id

        assert cancel(buffered.id) is True
        assert r.exists(buffered.lock_key)  # fetched: its worker frees it when it skips it
        holder = holder_value(buffered)
        # the heartbeat (every 0.5 s while the blocker runs) reads the cancelled set
        wait_for(lambda: holder in worker.executor.cancelled.get("default", ()))

        r.set(f"{tasks.runs_key()}:gate:1", "1")
        broker = get_store().streams
        wait_for(lambda: lookup(blocker.id).status == "succeeded"
                 and broker.pending("default") == 0 and broker.length("default") == 0)

    assert runs(r, "unique_records") == 0
    assert lookup(buffered.id).status == "cancelled"
    assert not r.exists(buffered.lock_key)
    assert not r.smembers(keys.cancelled_key(get_store().prefix, "default"))


def test_a_stream_id_after_a_move_goes_only_to_the_record_of_that_dispatch(r):
    from django_taskrunner.store.records import RecordWrite

    store = get_store().records
    prefix = get_store().prefix
    mine = tasks.noop.dispatch({"n": 1}, task_id="mine")  # a record at dispatch
    store.set_stream_ids([(mine.id, "", "1-1")])
    assert lookup(mine.id).stream_id == "1-1"

    store.write([RecordWrite("held", (("s", "queued"), ("q", "default"), ("h", "held#abc")),
                             600)])
    store.set_stream_ids([("held", "held#other", "2-1")])  # a later dispatch's record
    assert lookup("held").stream_id is None
    store.set_stream_ids([("held", "held#abc", "2-2")])
    assert lookup("held").stream_id == "2-2"

    store.write([RecordWrite("done", (("s", "succeeded"), ("q", "default")), 600, final=True)])
    store.set_stream_ids([("done", "", "3-1"), ("gone", "", "3-2"), ("", "", "3-3")])
    assert lookup("done").stream_id is None  # it ran: no entry to read
    assert not r.exists(keys.record_key(prefix, "gone"))  # no record is made without its TTL
