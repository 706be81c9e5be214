"""Eager mode: dispatched tasks run at once in the calling process, in a TestCase, with
no Redis at all (the Redis URL below points at a closed port)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from django.test import TestCase, override_settings
from django.utils import timezone

from django_taskrunner import (
    InvalidTaskPayload,
    TaskAlreadyDispatched,
    TaskIdConflict,
    dispatch,
    dispatch_many,
)
from django_taskrunner.core import eager
from tests.testapp import eager_tasks
from tests.testapp.eager_tasks import (
    eager_async,
    eager_flaky,
    eager_note,
    eager_redispatches_own_id,
    eager_unique,
    eager_while_locked,
    eager_with_context,
)
from tests.testapp.models import Note

NO_REDIS = {"REDIS_URL": "redis://127.0.0.1:1/0", "CONNECT_TIMEOUT": 0.2, "EAGER": True}


def texts() -> list[str]:
    return sorted(Note.objects.values_list("text", flat=True))


class EagerModeTests(TestCase):
    def setUp(self) -> None:
        self.enterContext(override_settings(TASKRUNNER=NO_REDIS))
        eager_tasks.calls.clear()

    def test_dispatch_runs_the_task_at_once_on_its_payload_after_a_json_round_trip(self):
        message = eager_note.dispatch({"text": "a", "items": (1, 2)})

        # The task saw what a worker would: the tuple came back a list
        assert texts() == ["note:a:list"]
        assert message.task_name == eager_note.name and message.attempt == 1

    def test_a_payload_a_real_dispatch_refuses_fails_the_same_way(self):
        with override_settings(TASKRUNNER={**NO_REDIS, "EAGER": False}):
            with pytest.raises(InvalidTaskPayload) as real:
                dispatch(eager_note, {"text": object()})
        with pytest.raises(InvalidTaskPayload) as eagerly:
            dispatch(eager_note, {"text": object()})
        assert str(eagerly.value) == str(real.value)
        assert texts() == []

    def test_the_tasks_exception_propagates_after_its_retries_without_waiting(self):
        with pytest.raises(RuntimeError, match="flaky failed"):
            eager_flaky.dispatch({"text": "x"})
        assert eager_tasks.calls["flaky:x"] == 3  # max_retry=2: three attempts, no backoff

        message = eager_flaky.dispatch({"text": "y", "fails": 1})
        assert eager_tasks.calls["flaky:y"] == 2 and message.attempt == 2

    def test_delays_are_ignored(self):
        eager_note.dispatch_delayed({"text": "later"}, delay=timedelta(hours=1))
        eager_note.schedule_for({"text": "tomorrow"}, when=timezone.now() + timedelta(days=1))

        assert texts() == ["note:later", "note:tomorrow"]

    def test_dispatch_many_checks_every_payload_before_running_any(self):
        with pytest.raises(InvalidTaskPayload):
            dispatch_many(eager_note, [{"text": "ok"}, {"text": {1, 2}}])
        assert texts() == []

        messages = dispatch_many(eager_note, [{"text": "1"}, {"text": "2"}])
        assert [m.payload for m in messages] == [{"text": "1"}, {"text": "2"}]
        assert texts() == ["note:1", "note:2"]

    def test_the_context_is_given_to_a_task_that_takes_it(self):
        eager_with_context.dispatch({})

        assert texts() == [f"ctx:{eager_with_context.name}:1:False:True"]

    def test_an_async_task_runs_to_completion_and_uses_the_callers_database(self):
        eager_async.dispatch({"text": "a"})

        assert texts() == ["async:a"]

    def test_an_async_task_dispatched_inside_a_running_loop_still_runs_to_completion(self):
        async def view_like() -> None:
            eager_tasks.eager_async_counts.dispatch({"text": "in-loop"})

        asyncio.run(view_like())

        assert eager_tasks.calls["async_counts:in-loop"] == 1

    def test_a_unique_lock_is_held_while_the_task_runs_and_freed_per_its_mode(self):
        # until_finished (the default): a duplicate dispatched while it runs is refused...
        with pytest.raises(TaskAlreadyDispatched) as raised:
            eager_unique.dispatch({"text": "k", "again": True})
        assert ":unique:" in raised.value.lock_key
        # ...and the lock was freed when it finished (failed, here), so this one runs
        eager_unique.dispatch({"text": "k"})
        assert eager_tasks.calls["unique:k"] == 2

        # while_locked: the lock outlives the run, until its TTL
        eager_while_locked.dispatch({})
        with pytest.raises(TaskAlreadyDispatched):
            eager_while_locked.dispatch({})
        eager.clear_locks()
        eager_while_locked.dispatch({})
        assert eager_tasks.calls["while_locked"] == 2

    def test_a_task_id_is_reserved_while_its_task_runs(self):
        with pytest.raises(TaskIdConflict):
            eager_redispatches_own_id.dispatch({"task_id": "order-7"}, task_id="order-7")
        # freed when it ended: the same id may be dispatched again
        eager_note.dispatch({"text": "again"}, task_id="order-7")
        assert "note:again" in texts()

    def test_dispatch_on_from_a_model_save_runs_the_task_on_commit(self):
        eager_tasks.connect_note_saved()
        self.addCleanup(eager_tasks.disconnect_note_saved)

        # In a TestCase the transaction never commits: capture the on-commit callbacks
        with self.captureOnCommitCallbacks(execute=True) as callbacks:
            Note.objects.create(text="saved:1")
            assert eager_tasks.calls.get("seen:saved:1") is None  # not before the commit

        assert len(callbacks) == 1
        assert eager_tasks.calls["seen:saved:1"] == 1

    def test_dispatch_on_commit_waits_for_the_commit(self):
        with self.captureOnCommitCallbacks(execute=True):
            eager_note.dispatch_on_commit({"text": "committed"})
            assert texts() == []

        assert texts() == ["note:committed"]
