"""The worker's signals: sent with the task, its message and the outcome; a receiver that
raises is logged and changes nothing."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from django_taskrunner import (
    TaskMessage,
    task_failed,
    task_retried,
    task_started,
    task_succeeded,
)
from django_taskrunner.store import get_store
from tests.testapp.tasks import always_fails, noop, runs_key

pytestmark = pytest.mark.django_db(transaction=True)

SIGNALS = {"started": task_started, "succeeded": task_succeeded, "retried": task_retried,
           "failed": task_failed}


@pytest.fixture
def heard() -> Iterator[list[tuple[str, Any, dict[str, Any]]]]:
    """Every signal sent, as (name, sender, kwargs), while the test runs."""
    calls: list[tuple[str, Any, dict[str, Any]]] = []
    lock = threading.Lock()
    receivers = {}
    for name, signal in SIGNALS.items():
        def receiver(sender: Any, name: str = name, **kwargs: Any) -> None:
            kwargs.pop("signal")
            with lock:
                calls.append((name, sender, kwargs))
        receivers[name] = receiver
        signal.connect(receiver)
    yield calls
    for name, signal in SIGNALS.items():
        signal.disconnect(receivers[name])


def test_a_success_sends_started_then_succeeded(heard, run_burst):
    message = noop.dispatch({"n": 1})
    run_burst()
    assert [(name, sender) for name, sender, _ in heard] == [("started", noop),
                                                            ("succeeded", noop)]
    started, succeeded = heard[0][2], heard[1][2]
    assert isinstance(started["message"], TaskMessage) and started["message"].id == message.id
    assert succeeded["message"].id == message.id and succeeded["message"].attempt == 1
    assert succeeded["duration"] >= 0 and "error" not in succeeded


def test_retries_then_the_failure_for_good_carry_the_error(heard, run_burst):
    message = always_fails.dispatch({"n": 1})
    run_burst()
    names = [name for name, _sender, _kwargs in heard]
    assert names == ["started", "retried", "started", "retried", "started", "failed"]
    retried = [kwargs for name, _s, kwargs in heard if name == "retried"]
    assert [k["message"].attempt for k in retried] == [1, 2]
    assert all(isinstance(k["error"], ValueError) and k["delay"] == 0 for k in retried)
    [failed] = [kwargs for name, _s, kwargs in heard if name == "failed"]
    assert failed["message"].id == message.id and failed["message"].attempt == 3
    assert str(failed["error"]) == "boom {'n': 1}" and failed["duration"] >= 0


def test_a_receiver_for_one_task_hears_that_task_only(run_burst):
    seen: list[str] = []

    def on_noop(sender: Any, message: TaskMessage, **kwargs: Any) -> None:
        seen.append(message.task_name)

    task_succeeded.connect(on_noop, sender=noop)
    try:
        noop.dispatch({"n": 1})
        always_fails.dispatch({"n": 2})
        run_burst()
    finally:
        task_succeeded.disconnect(on_noop, sender=noop)
    assert seen == ["tests.testapp.tasks.noop"]


def test_a_receiver_that_raises_is_logged_and_the_task_still_succeeds(r, run_burst, caplog):
    def broken(sender: Any, **kwargs: Any) -> None:
        raise RuntimeError("receiver bug")

    task_started.connect(broken)
    task_succeeded.connect(broken)
    try:
        message = noop.dispatch({"n": 1})
        run_burst()
    finally:
        task_started.disconnect(broken)
        task_succeeded.disconnect(broken)
    assert r.hget(runs_key(), "noop:1") == b"1"  # it ran once
    assert get_store().streams.pending("default") == 0  # and was acked
    errors = [rec for rec in caplog.records if rec.name == "django_taskrunner.worker.steps"]
    assert len(errors) == 2 and all(rec.levelno == logging.ERROR for rec in errors)
    assert f"id={message.id}" in errors[0].getMessage()
    assert "broken" in errors[0].getMessage()
    assert isinstance(errors[0].exc_info[1], RuntimeError)
