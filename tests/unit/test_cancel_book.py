"""The worker's book of cancels: a notice and the skip step never cross, whichever
comes first; notices of messages the worker does not hold are forgotten in time."""

from __future__ import annotations

from django_taskrunner import Task, TaskMessage
from django_taskrunner.core import records
from django_taskrunner.worker import cancels, keepalive
from django_taskrunner.worker.cancels import CancelBook
from django_taskrunner.worker.running import RunningSet

MEMBER = "m1#tok"


def book_and_attempt() -> tuple[CancelBook, RunningSet, Task, TaskMessage]:
    running = RunningSet()
    task = Task(fn=lambda payload: None, name="t")
    message = TaskMessage(id="m1", task_name="t", queue="default", payload=None,
                          dispatch_token="tok", stream_id="1-0")  # noqa: S106 - a token
    return CancelBook(running), running, task, message


def test_a_notice_before_the_skip_step_skips_the_message_once():
    book, _running, _task, _message = book_and_attempt()
    assert book.notice("default", "1-0", MEMBER, "m1") == "skip"
    assert book.should_skip("default", "1-0", MEMBER, frozenset()) is True
    # consumed: a later dispatch of the same holder value is not skipped by it
    assert book.should_skip("default", "2-0", MEMBER, frozenset()) is False


def test_a_member_of_the_fetched_cancelled_set_is_skipped():
    book, *_ = book_and_attempt()
    assert book.should_skip("default", "1-0", MEMBER, {MEMBER}) is True


def test_a_notice_after_the_skip_step_tells_the_attempt_once_it_registers():
    book, running, task, message = book_and_attempt()
    assert book.should_skip("default", "1-0", MEMBER, frozenset()) is False
    assert book.notice("default", "1-0", MEMBER, "m1") == "running"  # not registered yet
    attempt = running.start(task, message, 300.0, "default")
    book.started(attempt)
    assert attempt.cancel.is_set() and attempt.cancel_requested


def test_a_notice_of_a_running_attempt_tells_it_at_once():
    book, running, task, message = book_and_attempt()
    assert book.should_skip("default", "1-0", MEMBER, frozenset()) is False
    attempt = running.start(task, message, 300.0, "default")
    book.started(attempt)
    assert not attempt.cancel.is_set()
    assert book.notice("default", "1-0", MEMBER, "m1") == "running"
    assert attempt.cancel_requested


def test_a_notice_without_an_entry_finds_the_running_attempt_by_id_and_holder():
    book, running, task, message = book_and_attempt()
    attempt = running.start(task, message, 300.0, "default")
    assert book.notice("default", "", "m1#other", "m1") == "skip"  # another dispatch's
    assert not attempt.cancel_requested
    assert book.notice("default", "", MEMBER, "m1") == "running"
    assert attempt.cancel_requested


def test_a_finished_message_is_forgotten_and_old_notices_pruned(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(cancels.clock, "monotonic", lambda: now[0])
    book, *_ = book_and_attempt()
    assert book.should_skip("default", "1-0", MEMBER, frozenset()) is False
    book.finished("default", "1-0")
    assert book.notice("default", "1-0", MEMBER, "m1") == "skip"  # no longer passed
    now[0] += cancels.NOTICE_KEEP_S + 61
    book.notice("default", "9-0", "other#tok", "other")  # prunes on the way
    assert book.should_skip("default", "1-0", MEMBER, frozenset()) is False


def test_cancel_waits_for_a_holder_that_beats_and_not_for_a_silent_one():
    # a live worker beats for every message it holds at least every MAX_INTERVAL seconds
    assert records.HOLDER_SILENT_MS > keepalive.MAX_INTERVAL * 1000
