"""A task not started within `expires` seconds of its dispatch is not run: it becomes a
failed row with an "expired" error and leaves the queue."""

from __future__ import annotations

import pytest

from django_taskrunner import dispatch
from django_taskrunner.models import FailedTask
from django_taskrunner.store import get_store
from tests.testapp.tasks import expiring, noop, runs_key
from tests.worker_helpers import MovableClock

pytestmark = pytest.mark.django_db(transaction=True)


def ran(r, field: str) -> bool:
    return r.hget(runs_key(), field) is not None


def assert_queue_empty() -> None:
    broker = get_store().streams
    assert broker.length("default") == 0
    assert broker.pending("default") == 0


def test_a_task_past_its_own_expires_is_recorded_expired_not_run(r, run_burst, monkeypatch):
    # Given a task declared with expires=0.2, dispatched, and no worker for 0.3 s
    message = expiring.dispatch({"n": 1})
    MovableClock.install(monkeypatch).advance(0.3)

    # When a worker gets to it
    run_burst()

    # Then it is not run, but recorded as expired, and the queue is empty
    assert not ran(r, "expiring:1")
    row = FailedTask.objects.get(message_id=message.id)
    assert row.error_class == "django_taskrunner.exceptions.TaskExpired"
    assert "expired before it started" in row.error
    assert row.attempts == 0
    assert_queue_empty()


def test_expires_given_at_dispatch_applies_to_a_task_without_one(r, run_burst, monkeypatch):
    late = dispatch(noop, {"n": "late"}, expires=0.2)
    dispatch(noop, {"n": "prompt"}, expires=60)
    MovableClock.install(monkeypatch).advance(0.3)

    run_burst()

    assert not ran(r, "noop:late")
    assert ran(r, "noop:prompt")
    assert list(FailedTask.objects.values_list("message_id", flat=True)) == [late.id]
    assert_queue_empty()


def test_expires_given_at_dispatch_overrides_the_tasks_own(r, run_burst, monkeypatch):
    expiring.dispatch({"n": 1}, expires=60)
    MovableClock.install(monkeypatch).advance(0.3)  # past the task's own 0.2 s

    run_burst()

    assert ran(r, "expiring:1")
    assert FailedTask.objects.count() == 0


def test_a_task_run_before_its_expiry_runs_normally(r, run_burst, monkeypatch):
    message = expiring.dispatch({"n": 1})
    assert message.expires_at_ms == message.dispatched_at_ms + 200
    # The worker's clock a minute behind: it starts the task before its 0.2 s are up
    # however long this busy machine takes to get the burst run going.
    MovableClock.install(monkeypatch).advance(-60)

    run_burst()

    assert ran(r, "expiring:1")
    assert FailedTask.objects.count() == 0
