"""`async def` tasks: awaited on the worker's event loop, many side by side, with the
same retries, time limits, failed rows and graceful shutdown as plain tasks."""

from __future__ import annotations

import pytest

from django_taskrunner.models import FailedTask
from django_taskrunner.store.broker import get_broker
from tests.testapp.async_tasks import async_always_fails, async_ping
from tests.testapp.tasks import runs_key

pytestmark = pytest.mark.django_db(transaction=True)


def count(r, field: str) -> int:
    return int(r.hget(runs_key(), field) or 0)


def test_an_async_task_runs_its_body_and_is_not_just_counted_a_success(r, run_burst):
    # Given an `async def` task dispatched once
    async_ping.dispatch({"n": 1})

    # When a worker drains the queue
    run_burst()

    # Then the body ran (it was awaited, not dropped as a never-awaited coroutine)
    assert count(r, "async_ping:1") == 1
    assert get_broker().pending("default") == 0


def test_an_async_task_that_raises_leaves_a_failed_row(r, run_burst):
    message = async_always_fails.dispatch({"n": 1})

    run_burst()

    row = FailedTask.objects.get(message_id=message.id)
    assert row.error_class == "ValueError"
    assert "async boom" in row.error
    assert count(r, "async_always_fails:1") == 1


def test_a_plain_function_returning_a_coroutine_fails_with_a_clear_message(r, run_burst):
    from tests.testapp.async_tasks import sync_returns_coroutine

    message = sync_returns_coroutine.dispatch({"n": 1})

    run_burst()

    row = FailedTask.objects.get(message_id=message.id)
    assert row.error_class == "TypeError"
    assert "returned coroutine, which was not awaited" in row.error
    assert "async def" in row.error
    assert count(r, "sync_returns_coroutine:ran:1") == 0
