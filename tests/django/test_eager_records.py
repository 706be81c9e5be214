"""Eager mode keeps the records of its runs in the process: `lookup(id)` and `wait(id)`
answer for an eagerly run task with no Redis (the URL below points at a closed port).
Outside eager mode, a lookup Redis cannot answer says it could not read."""

from __future__ import annotations

import socket

import pytest
from django.test import TestCase, override_settings

from django_taskrunner import RedisUnavailable, lookup, wait
from tests.testapp import eager_tasks
from tests.testapp.eager_tasks import eager_flaky, eager_note

NO_REDIS = {"REDIS_URL": "redis://127.0.0.1:1/0", "CONNECT_TIMEOUT": 0.2, "EAGER": True}


class EagerRecordTests(TestCase):
    def setUp(self) -> None:
        self.enterContext(override_settings(TASKRUNNER=NO_REDIS))
        eager_tasks.calls.clear()

    def test_lookup_reads_an_eager_run_from_the_process_not_from_redis(self):
        message = eager_note.dispatch({"text": "a"})

        record = lookup(message.id)

        assert (record.status, record.result, record.task_name) == (
            "succeeded", "returned", eager_note.name)
        assert record.finished and record.finished_at >= record.started_at

    def test_wait_returns_the_final_record_at_once(self):
        message = eager_note.dispatch({"text": "b"})

        assert wait(message.id, timeout=1).status == "succeeded"

    def test_a_run_whose_last_attempt_raised_reads_as_failed_with_its_error(self):
        with pytest.raises(RuntimeError):
            eager_flaky.dispatch({"text": "c"}, task_id="flaky-c")

        record = lookup("flaky-c")

        assert (record.status, record.error, record.attempt) == (
            "failed", "RuntimeError: flaky failed", 3)

    def test_an_id_no_eager_run_had_is_unknown(self):
        assert lookup("never-dispatched") is None
        assert wait("never-dispatched", timeout=1) is None

    def test_the_records_are_forgotten_when_the_settings_change(self):
        message = eager_note.dispatch({"text": "d"})

        with override_settings(TASKRUNNER={**NO_REDIS, "PREFIX": "other"}):
            assert lookup(message.id) is None


@pytest.mark.django_db  # a lookup Redis cannot answer looks in the outbox table too
def test_a_lookup_redis_refuses_says_it_could_not_read(settings):
    with socket.socket() as held:  # bound, never listening: refused, and no one else's
        held.bind(("127.0.0.1", 0))
        settings.TASKRUNNER = {"REDIS_URL": f"redis://127.0.0.1:{held.getsockname()[1]}/0"}
        with pytest.raises(RedisUnavailable) as caught:
            lookup("some-id")

    assert "cannot look task 'some-id' up" in str(caught.value)
    assert "it could not be read" in str(caught.value)
    assert "queued" not in str(caught.value)
