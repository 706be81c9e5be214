"""`task_id="..."`: one task with that id in the queue while pending, running or retrying;
the id becomes the message id; free again once the task finished for good."""

from __future__ import annotations

import pytest

from django_taskrunner import (
    InvalidTaskOptions,
    TaskAlreadyDispatched,
    TaskIdConflict,
    TaskMessage,
    dispatch,
)
from django_taskrunner.models import FailedTask
from django_taskrunner.store import get_store
from tests.internals import TASK_ID_TTL_MS, holder_value
from tests.testapp.tasks import runs_key, unique_order
from tests.worker_helpers import MovableClock

pytestmark = pytest.mark.django_db(transaction=True)

NOOP = "tests.testapp.tasks.noop"
ID_PROBE = "tests.testapp.tasks.id_probe"


def id_key(prefix: str, task_id: str, queue: str = "default") -> str:
    return f"{prefix}:{{{queue}}}:id:{task_id}"


def probes(r, task_id: str) -> dict[int, str]:
    found = {}
    for field, value in r.hgetall(runs_key()).items():
        name = field.decode()
        if name.startswith(f"idprobe:{task_id}:"):
            found[int(name.rsplit(":", 1)[1])] = value.decode()
    return found


def test_the_task_id_is_the_message_id_and_a_second_dispatch_conflicts(r, prefix):
    message = dispatch(NOOP, {"n": 1}, task_id="report-2024-06")

    assert message.id == "report-2024-06"
    [(_stream_id, fields)] = r.xrange(get_store().streams.stream("default"))
    assert TaskMessage.from_json(fields[b"m"]).id == "report-2024-06"
    assert r.get(id_key(prefix, "report-2024-06")).decode() == holder_value(message)
    assert holder_value(message).startswith("report-2024-06#")
    assert TASK_ID_TTL_MS - 5_000 < r.pttl(id_key(prefix, "report-2024-06")) <= TASK_ID_TTL_MS

    with pytest.raises(TaskIdConflict) as conflict:
        dispatch(NOOP, {"n": 2}, task_id="report-2024-06")
    assert conflict.value.holder_id == "report-2024-06"
    assert conflict.value.id_key == id_key(prefix, "report-2024-06")
    assert get_store().streams.length("default") == 1


def test_the_id_is_reserved_while_running_and_retrying_and_free_after_success(r, run_burst):
    dispatch(ID_PROBE, {"fail": 2}, task_id="job-7")  # fails twice, succeeds on attempt 3

    run_burst()

    assert probes(r, "job-7") == {1: "held:job-7", 2: "held:job-7", 3: "held:job-7"}
    assert r.hget(runs_key(), "id_probe:inner:job-7") is None  # no duplicate ever ran
    again = dispatch(ID_PROBE, {}, task_id="job-7")
    assert again.id == "job-7"


def test_each_attempt_a_worker_starts_renews_the_reservation(r, run_burst, prefix):
    dispatch(ID_PROBE, {"fail": 1}, task_id="long-queued")
    r.pexpire(id_key(prefix, "long-queued"), 10_000)  # as if it waited long in the queue

    run_burst()

    for attempt in (1, 2):
        ttl = int(r.hget(runs_key(), f"idttl:long-queued:{attempt}"))
        assert TASK_ID_TTL_MS - 60_000 < ttl <= TASK_ID_TTL_MS


def test_the_id_is_free_after_the_task_failed_for_good(r, run_burst, prefix):
    dispatch(ID_PROBE, {"fail": 99}, task_id="job-8")

    run_burst()

    assert probes(r, "job-8") == {1: "held:job-8", 2: "held:job-8", 3: "held:job-8"}
    assert FailedTask.objects.get().message_id == "job-8"
    assert r.exists(id_key(prefix, "job-8")) == 0
    dispatch(ID_PROBE, {}, task_id="job-8")


def test_the_id_is_free_after_the_task_expired_unstarted(r, run_burst, prefix, monkeypatch):
    dispatch(NOOP, {"n": 1}, task_id="late", expires=0.001)
    MovableClock.install(monkeypatch).advance(0.01)
    run_burst()

    assert r.exists(id_key(prefix, "late")) == 0
    assert FailedTask.objects.get().message_id == "late"


def test_the_same_id_on_another_queue_is_another_reservation(r, prefix):
    dispatch(NOOP, {"n": 1}, task_id="twin")
    dispatch(NOOP, {"n": 1}, task_id="twin", queue="other")

    assert r.exists(id_key(prefix, "twin"), id_key(prefix, "twin", "other")) == 2


def test_task_id_with_a_unique_lock_reserves_both_and_reports_the_id_first(r, prefix):
    message = dispatch(unique_order, {"order": "o-9"}, task_id="o9")

    assert r.get(message.lock_key).decode() == holder_value(message)
    assert r.get(id_key(prefix, "o9")).decode() == holder_value(message)
    with pytest.raises(TaskIdConflict):
        dispatch(unique_order, {"order": "o-9"}, task_id="o9")
    with pytest.raises(TaskAlreadyDispatched) as held:
        dispatch(unique_order, {"order": "o-9"}, task_id="o10")
    assert held.value.holder_id == "o9"
    assert r.exists(id_key(prefix, "o10")) == 0  # refused: nothing reserved


@pytest.mark.parametrize("bad", ["", 42, "x" * 201, "line\nbreak"])
def test_a_bad_task_id_is_refused_before_redis(r, bad):
    with pytest.raises(InvalidTaskOptions, match="task_id of task 'tests.testapp.tasks.noop'"):
        dispatch(NOOP, {}, task_id=bad)
    assert get_store().streams.length("default") == 0
