"""`async def` tasks: awaited on the worker's event loop, many side by side, with the
same retries, time limits, failed rows and graceful shutdown as plain tasks."""

from __future__ import annotations

import logging
import signal
import time

import pytest

from django_taskrunner.models import FailedTask
from django_taskrunner.store import get_store
from tests.integration.test_shutdown import wait_until_started
from tests.testapp.async_tasks import async_always_fails, async_ping
from tests.testapp.tasks import runs_key
from tests.worker_helpers import app_now_ms, set_app_clock, wait_for, worker_thread

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
    assert get_store().streams.pending("default") == 0


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


def test_two_hundred_half_second_tasks_drain_side_by_side_on_one_thread(r, run_burst):
    # Given 200 async tasks that each await 0.5 s (100 s one after another)
    from tests.testapp.async_tasks import async_sleeper

    async_sleeper.dispatch_many([{"n": n, "seconds": 0.5} for n in range(200)])

    # When one worker with a single thread drains them
    started = time.monotonic()
    run_burst("--concurrency", "1", "--batch-size", "50")
    took = time.monotonic() - started

    # Then every one ran, far sooner than serially (the bound is generous on purpose:
    # the point is not-serial, not a speed)
    assert all(count(r, f"async_sleeper:{n}") == 1 for n in range(200))
    assert took < 30, took
    assert get_store().streams.pending("default") == 0


def test_an_async_task_is_retried_like_a_plain_one(r, run_burst):
    from tests.testapp.async_tasks import async_fails_twice

    message = async_fails_twice.dispatch({"n": 1})

    run_burst()

    # It raised twice, was retried twice (max_retry=2), and the third attempt succeeded
    assert count(r, "async_fails_twice:1") == 3
    assert not FailedTask.objects.filter(message_id=message.id).exists()


def test_an_async_task_that_never_finishes_is_cancelled_at_its_time_limit(r, run_burst):
    from tests.testapp.async_tasks import async_never_finishes

    message = async_never_finishes.dispatch({"n": 1})

    run_burst()

    # The coroutine saw CancelledError at its limit, and the attempt failed for good
    assert count(r, "async_never_finishes:cancelled:1") == 1
    row = FailedTask.objects.get(message_id=message.id)
    assert row.error_class == "django_taskrunner.exceptions.TimeLimitExceeded"
    assert "past its time limit of 0.3s" in row.error


def test_a_coroutine_that_swallows_its_cancellation_is_given_up_on(r, taskrunner_settings):
    from tests.testapp.async_tasks import async_ignores_cancel

    taskrunner_settings(TIME_LIMIT_GRACE=0.2)
    message = async_ignores_cancel.dispatch({"n": 1})
    behind = async_ping.dispatch({"n": 2})

    with worker_thread(concurrency=1) as worker:
        # After the grace the attempt is failed, while the coroutine still runs
        row = wait_for(lambda: FailedTask.objects.filter(message_id=message.id).first())
        wait_for(lambda: count(r, "async_ping:2") == 1)
        assert count(r, "async_ignores_cancel:end:1") == 0
        assert worker.pool.abandoned == 0  # no pool thread was given up on
        # When the coroutine finally returns, its late result is ignored
        wait_for(lambda: count(r, "async_ignores_cancel:end:1") == 1)

    assert row.error_class == "django_taskrunner.exceptions.TimeLimitExceeded"
    assert count(r, "async_ignores_cancel:swallowed:1") >= 1
    assert FailedTask.objects.count() == 1 and behind.id != message.id
    assert get_store().streams.pending("default") == 0


def test_an_async_task_takes_its_context(r, run_burst):
    from tests.testapp.async_tasks import async_with_context

    async_with_context.dispatch({"n": 1}, queue="default")

    run_burst()

    name = async_with_context.name
    assert count(r, f"async_with_context:{name}:default:1:1") == 1
    assert count(r, "async_with_context:beat:True:cancelled:False:1") == 1


def test_the_worker_holds_no_more_than_its_async_slots_and_one_batch(r, taskrunner_settings):
    # Given 40 long async tasks, 5 async slots, 1 thread and batches of 3
    from tests.testapp.async_tasks import async_sleeper

    taskrunner_settings(ASYNC_CONCURRENCY=5)
    async_sleeper.dispatch_many([{"n": n, "seconds": 3} for n in range(40)])

    with worker_thread(concurrency=1, batch_size=3) as worker:
        # When the slots are full
        wait_for(lambda: worker.coroutines.active == 5)
        time.sleep(0.5)
        # Then it runs 5 and holds at most its thread plus one batch more
        assert worker.coroutines.active == 5
        assert len(worker.running.snapshot()) == 5
        assert get_store().streams.pending("default") <= 5 + 1 + 3


def test_an_event_loop_blocked_by_a_sync_call_is_logged(r, run_burst, caplog):
    from tests.testapp.async_tasks import async_blocks_loop

    async_blocks_loop.dispatch({"n": 1, "seconds": 1.6})

    with caplog.at_level(logging.WARNING, logger="django_taskrunner.worker.async_runner"):
        run_burst()

    assert count(r, "async_blocks_loop:1") == 1
    [record] = [rec for rec in caplog.records if "event loop of async tasks" in rec.message]
    assert "has been blocked for" in record.message
    assert "time.sleep" in record.message  # the loop's stack names the blocking call


def test_sigterm_waits_for_running_coroutines_and_puts_back_the_rest(r, spawn_worker, run_burst):
    # Given a worker awaiting 3 two-second async tasks (3 slots), 3 more waiting behind
    from tests.testapp.async_tasks import async_sleeper

    async_sleeper.dispatch_many([{"n": n, "seconds": 2} for n in range(6)])
    worker = spawn_worker("--queue", "default", "--concurrency", "1", "--batch-size", "3",
                          TASKRUNNER_TEST_SETTINGS='{"ASYNC_CONCURRENCY": 3}')
    wait_until_started(worker)
    wait_for(lambda: sum(count(r, f"async_sleeper:start:{n}") for n in range(6)) == 3)

    # When it gets SIGTERM mid-await
    worker.send_signal(signal.SIGTERM)
    output = worker.communicate(timeout=30)[0].decode()

    # Then the three running ones finished, it said it waited for them, and exited 0
    assert worker.returncode == 0, output
    finished = [n for n in range(6) if count(r, f"async_sleeper:{n}") == 1]
    assert len(finished) == 3, output
    assert "waiting up to 10s for 3 running task(s)" in output, output
    # and nothing is lost: the others are back on the stream and run later, once each
    assert get_store().streams.pending("default") == 0
    run_burst("--queue", "default")
    assert all(count(r, f"async_sleeper:{n}") == 1 for n in range(6))
    assert all(count(r, f"async_sleeper:start:{n}") == 1 for n in range(6))


def test_an_async_task_uses_the_orm_through_its_async_methods(r, run_burst):
    from tests.testapp.async_tasks import async_saves_note
    from tests.testapp.models import Note

    async_saves_note.dispatch({"text": "from a coroutine"})

    run_burst()

    assert list(Note.objects.values_list("text", flat=True)) == ["from a coroutine!"]


def test_an_async_task_frees_its_unique_lock_when_it_finishes(r, run_burst):
    from django_taskrunner import TaskAlreadyDispatched
    from tests.testapp.async_tasks import async_unique

    async_unique.dispatch({"n": 1})
    with pytest.raises(TaskAlreadyDispatched):
        async_unique.dispatch({"n": 1})  # held while it is queued

    run_burst()

    async_unique.dispatch({"n": 1})  # freed once it succeeded
    run_burst()
    assert count(r, "async_unique:1") == 2


def test_an_async_task_that_expired_before_it_started_is_not_run(r, run_burst, monkeypatch):

    message = async_ping.dispatch({"n": 9}, expires=1)
    later = app_now_ms() + 5000
    set_app_clock(monkeypatch, now_ms=lambda: later)

    run_burst()

    assert count(r, "async_ping:9") == 0
    row = FailedTask.objects.get(message_id=message.id)
    assert row.error_class == "django_taskrunner.exceptions.TaskExpired"


def test_an_awaited_task_three_times_longer_than_the_timeout_runs_once_between_two_workers(
    r, taskrunner_settings
):
    # Given a 1-second reservation timeout, two live workers and a 3-second async task
    from tests.testapp.async_tasks import async_sleeper

    taskrunner_settings(RESERVATION_TIMEOUT=1)
    broker = get_store().streams
    async_sleeper.dispatch({"n": "long", "seconds": 3})
    longest_idle = 0
    with worker_thread(consumer="worker-a"), worker_thread(consumer="worker-b"):
        # When it is awaited, the heartbeat keeps its message from looking idle
        wait_for(lambda: count(r, "async_sleeper:start:long") == 1)
        deadline = time.monotonic() + 15
        while count(r, "async_sleeper:long") == 0 and time.monotonic() < deadline:
            for row in r.xpending_range(broker.stream("default"), broker.group, "-", "+", 10):
                longest_idle = max(longest_idle, row["time_since_delivered"])
                assert row["times_delivered"] == 1
            time.sleep(0.05)
        wait_for(lambda: broker.pending("default") == 0)

    # Then it ran once, and was never taken over by the other worker
    assert count(r, "async_sleeper:long") == 1
    assert count(r, "async_sleeper:start:long") == 1
    assert longest_idle < 1000
