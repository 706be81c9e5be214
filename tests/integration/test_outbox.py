"""The transactional outbox: a dispatch written in the caller's transaction is queued
once it commits (at once, or by a flush once Redis is back), never when it rolls back,
and never twice. Runs on SQLite, and on PostgreSQL with TASKRUNNER_TEST_DATABASE_URL."""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models.signals import post_save

from django_taskrunner import (
    InvalidTaskOptions,
    InvalidTaskPayload,
    TaskMessage,
    TaskNotFound,
    dispatch,
    dispatch_on,
    dispatch_on_commit,
    lookup,
    task,
)
from django_taskrunner.core import outbox
from django_taskrunner.models import FailedTask, OutboxMessage
from django_taskrunner.store import get_store, keys
from django_taskrunner.store.errors import REDIS_DOWN
from tests.conftest import start_private_redis
from tests.internals import stream_messages
from tests.testapp.models import Note
from tests.testapp.tasks import noop, runs_key, unique_order
from tests.worker_helpers import wait_for, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)


def queued(r: Any, prefix: str, queue: str = "default") -> list[TaskMessage]:
    assert prefix == get_store().prefix
    return stream_messages(queue)


def runs(r: Any) -> dict[str, int]:
    return {key.decode(): int(value) for key, value in r.hgetall(runs_key()).items()}


@pytest.fixture
def own_redis(taskrunner_settings: Any) -> Iterator[Any]:
    """A private redis-server of this test, which it may stop and start again (on the
    same port); the app is pointed at it. Yields (stop, start)."""
    workdir = tempfile.mkdtemp(prefix="trtest-outbox-")
    state: dict[str, Any] = {}
    state["proc"], url = start_private_redis(workdir)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    taskrunner_settings(REDIS_URL=url, SOCKET_TIMEOUT=2, CONNECT_TIMEOUT=1)

    def stop() -> None:
        state["proc"].kill()
        state["proc"].wait(10)

    def start() -> None:
        state["proc"], _url = start_private_redis(workdir, port=port)

    try:
        yield stop, start
    finally:
        if state["proc"].poll() is None:
            state["proc"].terminate()
            state["proc"].wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


def test_a_commit_queues_the_task_at_once_and_leaves_no_row(r, prefix):
    with transaction.atomic():
        Note.objects.create(text="saved")
        message = dispatch_on_commit(noop, {"n": 1})
        assert OutboxMessage.objects.filter(message_id=message.id).exists()
        assert queued(r, prefix) == []
        assert lookup(message.id).status == "queued"  # from its outbox row, already

    assert [m.id for m in queued(r, prefix)] == [message.id]
    assert not OutboxMessage.objects.exists()
    assert lookup(message.id).status == "queued"  # its record in Redis now
    # Its mark in Redis outlives the row; it is deleted in the process's next move.
    mark = keys.outbox_mark_key(prefix, "default", message.id)
    assert r.exists(mark) == 1
    with transaction.atomic():
        dispatch_on_commit(noop, {"n": 2})
    assert r.exists(mark) == 0


def test_dispatch_transactional_goes_through_the_outbox_whatever_the_setting(
        r, prefix, taskrunner_settings):
    taskrunner_settings(OUTBOX=False)
    with transaction.atomic():
        message = dispatch(noop, {"n": 2}, transactional=True)
        assert OutboxMessage.objects.count() == 1
    assert [m.id for m in queued(r, prefix)] == [message.id]


def test_without_the_outbox_setting_dispatch_on_commit_writes_no_row(r, prefix,
                                                                    taskrunner_settings):
    taskrunner_settings(OUTBOX=False)
    with transaction.atomic():
        assert dispatch_on_commit(noop, {"n": 3}) is None
        assert not OutboxMessage.objects.exists()
    assert len(queued(r, prefix)) == 1


def test_a_hundred_rolled_back_transactions_dispatch_nothing(r, prefix):
    receiver = dispatch_on(post_save, noop, sender=Note,
                           payload=lambda instance, **kw: {"n": instance.pk})
    try:
        for index in range(100):
            with pytest.raises(RuntimeError), transaction.atomic():
                Note.objects.create(text=f"rolled back {index}")
                raise RuntimeError("roll back")
    finally:
        assert receiver.disconnect()
    assert not OutboxMessage.objects.exists()
    assert not Note.objects.exists()
    assert outbox.flush_all() == 0
    assert queued(r, prefix) == []


def test_bad_input_fails_at_the_call_inside_the_transaction():
    with pytest.raises(InvalidTaskPayload), transaction.atomic():
        Note.objects.create(text="kept only if the dispatch works")
        dispatch_on_commit(noop, {"n": object()})
    with pytest.raises(TaskNotFound), transaction.atomic():
        dispatch_on_commit("tests.testapp.tasks.no_such_task", {})
    assert not Note.objects.exists()
    assert not OutboxMessage.objects.exists()


def test_with_redis_down_a_thousand_saves_commit_and_run_exactly_once_when_it_is_back(
        own_redis, caplog):
    stop, start = own_redis
    stop()
    receiver = dispatch_on(post_save, noop, sender=Note,
                           payload=lambda instance, **kw: {"n": instance.pk})
    caplog.set_level(logging.WARNING, logger="django_taskrunner")
    try:
        for index in range(1000):
            with transaction.atomic():  # no exception reaches the caller after commit
                Note.objects.create(text=f"note {index}")
    finally:
        assert receiver.disconnect()

    assert Note.objects.count() == 1000
    assert OutboxMessage.objects.count() == 1000
    waiting = [rec for rec in caplog.records if "waits in the outbox" in rec.getMessage()]
    assert len(waiting) == 1000  # one line per task
    first = OutboxMessage.objects.order_by("pk").first()
    assert lookup(first.message_id).status == "queued"  # Redis down: read from the row

    start()
    assert outbox.flush_all() == 1000
    assert not OutboxMessage.objects.exists()
    client = get_store().client
    with worker_thread(concurrency=4):
        wait_for(lambda: sum(runs(client).values()) >= 1000, timeout=60)
    counts = runs(client)
    assert counts == {f"noop:{note.pk}": 1 for note in Note.objects.all()}


def test_the_fast_path_failing_leaves_the_row_and_the_leader_flushes_it(own_redis, caplog):
    stop, start = own_redis
    stop()
    with transaction.atomic():
        message = dispatch_on_commit(noop, {"n": "late"})
    assert OutboxMessage.objects.get().message_id == message.id
    with pytest.raises(REDIS_DOWN):
        outbox.flush()
    row = OutboxMessage.objects.get()
    assert row.attempts == 1 and "Redis unreachable" in row.last_error

    start()
    client = get_store().client
    with worker_thread():  # the leader's flusher moves it, the worker runs it
        wait_for(lambda: runs(client).get("noop:late") == 1, timeout=30)
    assert not OutboxMessage.objects.exists()


def test_a_flush_that_crashed_after_redis_took_the_rows_queues_nothing_twice(r, prefix):
    with transaction.atomic():
        plain = dispatch(noop, {"n": 1}, transactional=True)
        locked = dispatch(unique_order, {"order": "o-1"}, transactional=True)
        with_id = dispatch(noop, {"n": 2}, task_id="invoice-7", transactional=True)
        # The fast path is kept from running: the rows stay, as after a crash.
        connection.run_on_commit = []
    rows = [outbox.Row.of(row) for row in OutboxMessage.objects.order_by("pk")]
    assert len(rows) == 3

    first = outbox.move(rows)  # Redis took them; then the flusher "died": rows remain
    assert [o.status for o in first] == [outbox.SENT] * 3
    assert outbox.flush_all() == 3  # the next flush meets its own marks and reservations
    assert sorted(m.id for m in queued(r, prefix)) == sorted([plain.id, locked.id, with_id.id])
    assert not OutboxMessage.objects.exists()
    assert not FailedTask.objects.exists()


def test_a_unique_conflict_at_flush_is_logged_and_recorded_as_a_failed_row(r, prefix, caplog):
    holder = unique_order.dispatch({"order": "o-9"})
    caplog.set_level(logging.WARNING, logger="django_taskrunner")
    with transaction.atomic():
        late = dispatch_on_commit(unique_order, {"order": "o-9"})
    assert [m.id for m in queued(r, prefix)] == [holder.id]
    row = FailedTask.objects.get(message_id=late.id)
    assert row.error_class == "django_taskrunner.exceptions.TaskAlreadyDispatched"
    assert holder.id in row.error
    assert any(late.id in rec.getMessage() for rec in caplog.records)
    assert not OutboxMessage.objects.exists()


def test_a_task_id_conflict_at_flush_is_recorded_too(r, prefix):
    dispatch(noop, {"n": 1}, task_id="only-one")
    with transaction.atomic():
        dispatch_on_commit(noop, {"n": 2}, task_id="only-one")
    row = FailedTask.objects.get(message_id="only-one")
    assert row.error_class == "django_taskrunner.exceptions.TaskIdConflict"
    assert len(queued(r, prefix)) == 1


def test_a_row_whose_task_is_gone_at_flush_becomes_a_failed_row(r, prefix):
    with transaction.atomic():
        message = dispatch(noop, {"n": 1}, transactional=True)
        connection.run_on_commit = []  # left for the flush
    row = OutboxMessage.objects.get()
    row.body = row.body.replace("tests.testapp.tasks.noop", "tests.testapp.tasks.removed")
    row.save()

    assert outbox.flush_all() == 1
    failed = FailedTask.objects.get(message_id=message.id)
    assert failed.error_class == "django_taskrunner.exceptions.TaskNotFound"
    assert failed.worker == "outbox"
    assert queued(r, prefix) == []
    assert not OutboxMessage.objects.exists()


def _leave_rows(count: int) -> list[str]:
    """`count` rows left in the outbox (their fast path kept from running)."""
    ids = []
    with transaction.atomic():
        for index in range(count):
            ids.append(dispatch(noop, {"n": index}, transactional=True).id)
        connection.run_on_commit = []
    return ids


def test_flushers_side_by_side_queue_each_row_once(r, prefix):
    ids = _leave_rows(400)
    errors: list[BaseException] = []

    def flusher() -> None:
        try:
            while OutboxMessage.objects.exists():
                outbox.flush(batch=25)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=flusher) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert sorted(m.id for m in queued(r, prefix)) == sorted(ids)


def test_two_flushers_on_postgresql_skip_the_rows_the_other_holds(r, prefix):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (SELECT ... FOR UPDATE SKIP LOCKED): set "
                    "TASKRUNNER_TEST_DATABASE_URL=postgres://...")
    _leave_rows(10)
    taken = threading.Event()
    release = threading.Event()
    seen: list[int] = []

    def holder() -> None:
        try:
            with transaction.atomic():
                rows = outbox._take(4, "default")
                seen.append(len(rows))
                taken.set()
                release.wait(20)
        finally:
            connection.close()

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert taken.wait(20)
        assert outbox.flush(batch=100) == 6  # the four locked rows are skipped
    finally:
        release.set()
        thread.join(20)
    assert seen == [4]
    assert OutboxMessage.objects.count() == 4
    assert outbox.flush_all() == 4
    assert len(queued(r, prefix)) == 10


def test_a_move_after_the_server_lost_its_scripts_loads_them_and_queues_once(r, prefix):
    with transaction.atomic():
        first = dispatch_on_commit(noop, {"n": 1})
    r.script_flush()  # as after a Redis restart: the bare EVALSHA meets NOSCRIPT
    with transaction.atomic():
        second = dispatch_on_commit(noop, {"n": 2})
    assert [m.id for m in queued(r, prefix)] == [first.id, second.id]
    assert not OutboxMessage.objects.exists()


def test_runtasks_burst_moves_what_waits_in_the_outbox_and_runs_it(r, prefix, run_burst):
    ids = _leave_rows(3)
    run_burst("--queue", "default")
    assert not OutboxMessage.objects.exists()
    assert all(lookup(task_id).status == "succeeded" for task_id in ids)
    assert runs(r) == {"noop:0": 1, "noop:1": 1, "noop:2": 1}


# -- conflict policies at flush time ------------------------------------------------------

@task(name="tests.outbox.returning", unique=True, unique_for=60, on_conflict="return",
      unique_key=lambda payload: str(payload["k"]))
def returning(payload: Any) -> None:
    """A unique task whose duplicates are meant to fold into the holder."""


@task(name="tests.outbox.replacing", unique=True, unique_for=60, on_conflict="replace",
      unique_key=lambda payload: str(payload["k"]))
def replacing(payload: Any) -> None:
    """A unique task whose later dispatches replace a holder not started yet."""


@task(name="tests.outbox.debounced", unique_mode="debounce", debounce=60)
def debounced(payload: Any) -> None:
    """One run per quiet period, with the last payload."""


def test_a_conflict_under_on_conflict_return_folds_into_the_holder_without_a_failed_row(
        r, prefix):
    holder = returning.dispatch({"k": 1, "v": "first"})
    with transaction.atomic():
        dispatch_on_commit(returning, {"k": 1, "v": "second"})
    assert [(m.id, m.payload["v"]) for m in queued(r, prefix)] == [(holder.id, "first")]
    assert not FailedTask.objects.exists()
    assert not OutboxMessage.objects.exists()


def test_a_conflict_under_on_conflict_replace_gives_the_holder_the_new_payload(r, prefix):
    holder = replacing.dispatch({"k": 2, "v": "first"})
    with transaction.atomic():
        dispatch_on_commit(replacing, {"k": 2, "v": "second"})
    assert [(m.id, m.payload["v"]) for m in queued(r, prefix)] == [(holder.id, "second")]
    assert not FailedTask.objects.exists()
    assert not OutboxMessage.objects.exists()


def test_a_debounced_task_through_the_outbox_waits_its_quiet_period_with_the_last_payload(
        r, prefix):
    for n in range(3):
        with transaction.atomic():
            dispatch_on_commit(debounced, {"n": n})
    assert queued(r, prefix) == []
    waiting = r.zrange(keys.delayed_key(prefix, "default"), 0, -1)
    assert [TaskMessage.from_json(body).payload for body in waiting] == [{"n": 2}]
    assert not FailedTask.objects.exists()
    assert not OutboxMessage.objects.exists()


def test_a_per_call_on_conflict_is_refused_through_the_outbox_before_anything_is_written():
    with pytest.raises(InvalidTaskOptions, match="declared on_conflict"):
        with transaction.atomic():
            dispatch(unique_order, {"order": "o-1"}, transactional=True, on_conflict="return")
    assert not OutboxMessage.objects.exists()


def test_a_queue_used_only_through_the_outbox_is_consumed_by_runtasks_by_default(r):
    # the outbox's move announces the queue as a dispatch does: seen and used, so a
    # runtasks without -Q reads it
    from django_taskrunner.management.commands.runtasks import Command

    with transaction.atomic():
        dispatch_on_commit(noop, {"n": 1}, queue="outbox-only")
    assert [message.queue for message in queued(r, get_store().prefix, "outbox-only")] == [
        "outbox-only"]
    assert "outbox-only" in Command._default_queues("default", get_store().streams)
