"""Whatever a stream entry holds, the worker makes it one failed row and acks it, or runs
it once: it never leaves an entry pending, runs it twice, or stops (issue 22, bugs 8, 9)."""

from __future__ import annotations

import json
import logging

import pytest

from django_taskrunner.models import FailedTask
from django_taskrunner.store import get_store, keys
from tests.testapp.tasks import noop, runs_key, unique_order

pytestmark = pytest.mark.django_db(transaction=True)

NOOP = "tests.testapp.tasks.noop"


def runs(r, name: str) -> dict[str, int]:
    counts = r.hgetall(runs_key())
    return {k.decode().split(":", 1)[1]: int(v) for k, v in counts.items()
            if k.decode().startswith(name + ":")}


def body(**fields) -> bytes:
    """A noop message with `fields` set; raw JSON text for a value given as bytes."""
    data = {"v": 1, "id": "bad-1", "task": NOOP, "queue": "default", "payload": {"n": "bad"},
            "attempt": 1, "ts": 1_700_000_000_000}
    data.update({key: f"@{key}@" if isinstance(value, bytes) else value
                 for key, value in fields.items()})
    text = json.dumps(data).encode()
    for key, value in fields.items():
        if isinstance(value, bytes):
            text = text.replace(f'"@{key}@"'.encode(), value)
    return text


def add(r, raw: bytes) -> str:
    broker = get_store().streams
    return r.xadd(broker.stream("default"), {"m": raw}).decode()


def assert_nothing_left() -> None:
    broker = get_store().streams
    assert broker.pending("default") == 0
    assert broker.length("default") == 0


def test_entries_too_deep_to_decode_or_with_overflowing_numbers_become_failed_rows(
    r, run_burst
):
    # Given the entries of bug 8 between two good tasks
    noop.dispatch({"n": 1})
    bad = [
        b'{"v": 1, "id": "deep", "task": "t", "payload": ' + b"[" * 988 + b"]" * 988 + b"}",
        b'{"v": 1, "id": "deeper", "task": "t", "payload": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        body(attempt=b"1e400"), body(ts=b"1e400"), body(exp=b"1e400"), body(rt=b"1e400"),
        body(payload=b'{"n": 1e400}'), body(payload=b"NaN"),
        body(payload=b'"\\udcff"'),
    ]
    ids = [add(r, raw) for raw in bad]
    noop.dispatch({"n": 2})

    # When a worker drains the queue
    run_burst("--queue", "default")

    # Then the good ones ran, each bad one is one failed row, and nothing stays pending
    assert runs(r, "noop") == {"1": 1, "2": 1}
    rows = FailedTask.objects.order_by("message_id")
    assert sorted(row.message_id for row in rows) == sorted(f"{sid}@default" for sid in ids)
    assert {row.error_class for row in rows} == {
        "django_taskrunner.exceptions.InvalidTaskPayload"}
    assert all(row.task_name == "" for row in rows)  # the retry action cannot misuse them
    assert_nothing_left()


@pytest.mark.parametrize("lock", [5, True, ["k"], {"k": 1}, ""])
def test_a_lock_field_that_is_not_a_string_is_a_failed_row_and_the_task_does_not_run(
    r, run_burst, lock
):
    # Before: the task ran, freeing the lock raised AttributeError, the entry stayed
    # pending, was reclaimed and ran again, with a false WorkerLost row at the end.
    stream_id = add(r, body(lock=lock, mode="until_finished"))

    run_burst("--queue", "default")

    assert runs(r, "noop") == {}
    row = FailedTask.objects.get()
    assert row.message_id == f"{stream_id}@default"
    assert row.error_class == "django_taskrunner.exceptions.InvalidTaskPayload"
    assert "'lock'" in row.error
    assert_nothing_left()


@pytest.mark.parametrize("lock_of", ["stream", "other queue", "delayed", "no prefix"])
def test_a_lock_naming_a_key_outside_the_queues_lock_space_is_a_failed_row(
    r, run_burst, lock_of
):
    prefix = get_store().prefix
    lock = {"stream": keys.stream_key(prefix, "default"),
            "other queue": keys.unique_key(prefix, "other", NOOP, "k"),
            "delayed": keys.delayed_key(prefix, "default"),
            "no prefix": f"elsewhere:{NOOP}"}[lock_of]
    noop.dispatch({"n": "good"})
    add(r, body(lock=lock, mode="until_executing"))

    run_burst("--queue", "default")

    assert runs(r, "noop") == {"good": 1}
    row = FailedTask.objects.get()
    assert "not a unique lock of queue 'default'" in row.error
    assert_nothing_left()


@pytest.mark.parametrize("fields", [
    {"mode": "forever", "lock": "x"}, {"tid": "yes"}, {"attempt": 0}, {"attempt": 2.5},
    {"queue": 7}, {"ts": -1}, {"exp": "soon"}, {"v": True}, {"id": 12},
])
def test_any_other_field_that_cannot_be_used_is_a_failed_row(r, run_burst, fields):
    add(r, body(**fields))

    run_burst("--queue", "default")

    assert runs(r, "noop") == {}
    assert FailedTask.objects.get().error_class == (
        "django_taskrunner.exceptions.InvalidTaskPayload")
    assert_nothing_left()


def test_a_body_over_the_size_limit_is_a_failed_row_keeping_its_start(r, run_burst):
    from django_taskrunner.core.message import MESSAGE_MAX_BYTES

    add(r, body(payload="x" * MESSAGE_MAX_BYTES))

    run_burst("--queue", "default")

    row = FailedTask.objects.get()
    assert "over the limit" in row.error
    assert len(row.payload) == 64 * 1024
    assert_nothing_left()


def test_an_error_freeing_the_lock_after_a_success_is_logged_and_the_entry_acked(
    r, run_burst, caplog
):
    # Given a unique task whose lock key holds a value of another type when it finishes
    message = unique_order.dispatch({"order": "o-1"})
    r.delete(message.lock_key)
    r.hset(message.lock_key, "not", "a string")  # GET on it answers WRONGTYPE

    # When it runs
    with caplog.at_level(logging.ERROR, logger="django_taskrunner.worker.executor"):
        run_burst("--queue", "default")

    # Then it ran once, is acked (not run again), and the release error was logged
    assert runs(r, "unique_order") == {"o-1": 1}
    assert FailedTask.objects.count() == 0
    assert_nothing_left()
    assert any("could not free its unique lock" in rec.getMessage() for rec in caplog.records)


def test_the_row_of_an_entry_too_deep_to_parse_can_be_shown_and_is_kept_by_retry(r, run_burst):
    # The row keeps the raw body: the admin's detail page and its retry parse it again
    from tests.django.admin_helpers import page_module

    failed_page = page_module(FailedTask)  # the failed-task page's module

    add(r, b'{"v": 1, "id": "deep", "task": "t", "payload": ' + b"[" * 5000 + b"]" * 5000
        + b"}")
    run_burst("--queue", "default")
    row = FailedTask.objects.get()

    # shown as it is, not a RecursionError
    assert failed_page.pretty_json(row.payload) == row.payload
    report = failed_page.RetryReport()
    failed_page.retry_rows([row], report)
    assert (report.retried, report.kept) == (0, 1)
    assert FailedTask.objects.count() == 1
