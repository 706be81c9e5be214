"""Each dispatch holds its lock and task_id with a token of its own, so the stale run of
an earlier dispatch of the same task_id (a stalled worker, resumed after another worker
reclaimed and finished it) frees nothing the newer dispatch holds."""

from __future__ import annotations

import json
import signal

import pytest

from django_taskrunner import TaskAlreadyDispatched, TaskIdConflict, TaskMessage, dispatch
from django_taskrunner.core import unique as locks
from django_taskrunner.store import get_store
from django_taskrunner.worker.executor import Executor
from django_taskrunner.worker.fetcher import Delivery
from tests.testapp.tasks import runs_key
from tests.worker_helpers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

GATED = "tests.testapp.tasks.gated_report"
NOOP = "tests.testapp.tasks.noop"
# A stalled worker's messages are reclaimed 3 s after its last heartbeat.
WORKER_SETTINGS = {"TASKRUNNER_TEST_SETTINGS": json.dumps({"RESERVATION_TIMEOUT": 3})}


def lock_key(prefix: str) -> str:
    return f"{prefix}:{{default}}:unique:{GATED}:report"


def id_key(prefix: str, task_id: str = "report-1") -> str:
    return f"{prefix}:{{default}}:id:{task_id}"


def runs_started(r) -> int:
    return int(r.hget(runs_key(), "gated_report:report") or 0)


def ran_in(r, run: int) -> int:
    """The pid of the worker that started run number `run`. The task writes it just after
    counting the run (two commands): wait for it, rather than read between the two."""
    return int(wait_for(lambda: r.hget(runs_key(), f"gated_report:report:{run}"), 15))


def open_gate(r, run: int) -> None:
    r.set(f"{runs_key()}:gate:{run}", 1)


def test_a_stale_run_of_a_reused_task_id_frees_nothing_of_the_newer_dispatch(
        r, prefix, spawn_worker):
    # Given worker A running the first dispatch of task_id "report-1", then stalled
    worker_a = spawn_worker("--consumer-name", "worker-a", "--concurrency", "1",
                            "--batch-size", "1", "--queue", "default", "--queue", "a-only",
                            **WORKER_SETTINGS)
    dispatch(GATED, {"k": "report"}, task_id="report-1")
    wait_for(lambda: runs_started(r) == 1, 30)
    assert ran_in(r, 1) == worker_a.pid
    worker_a.send_signal(signal.SIGSTOP)

    # When worker B reclaims and finishes it, the id is dispatched again, and B runs that
    worker_b = spawn_worker("--consumer-name", "worker-b", "--concurrency", "2",
                            **WORKER_SETTINGS)
    wait_for(lambda: runs_started(r) == 2, 30)
    assert ran_in(r, 2) == worker_b.pid
    open_gate(r, 2)
    wait_for(lambda: not r.exists(lock_key(prefix)) and not r.exists(id_key(prefix)), 15)
    second = dispatch(GATED, {"k": "report"}, task_id="report-1")
    wait_for(lambda: runs_started(r) == 3, 15)
    assert ran_in(r, 3) == worker_b.pid

    # And A resumes and its stale run of the first dispatch finishes
    worker_a.send_signal(signal.SIGCONT)
    open_gate(r, 1)
    # A has one thread: once it ran this, the stale run is over, its release included.
    dispatch(NOOP, {"n": "after-a"}, queue="a-only")
    wait_for(lambda: r.hget(runs_key(), "noop:after-a"), 15)

    # Then the second dispatch still holds its lock and its task_id
    with pytest.raises(TaskAlreadyDispatched) as held:
        dispatch(GATED, {"k": "report"})
    assert held.value.holder_id == "report-1"
    with pytest.raises(TaskIdConflict):
        dispatch(NOOP, {"n": 2}, task_id="report-1")
    assert r.get(lock_key(prefix)).decode() == locks.holder_value(second)

    # And they are freed when the second dispatch finishes
    open_gate(r, 3)
    wait_for(lambda: not r.exists(lock_key(prefix)) and not r.exists(id_key(prefix)), 15)
    assert runs_started(r) == 3


def test_each_dispatch_of_a_task_id_holds_it_with_its_own_token_kept_across_retries(
        r, prefix):
    first = dispatch(NOOP, {"n": 1}, task_id="job-1")
    [(_stream_id, fields)] = r.xrange(get_store().streams.stream("default"))
    queued = TaskMessage.from_json(fields[b"m"])

    assert queued.dispatch_token == first.dispatch_token and first.dispatch_token
    value = r.get(id_key(prefix, "job-1")).decode()
    assert value == locks.holder_value(first) == f"job-1#{first.dispatch_token}"
    assert locks.holder_id(value) == "job-1"


def test_a_message_queued_without_a_token_still_frees_its_lock_and_task_id(r, prefix):
    # Given a message as an earlier version queued it: its lock and id hold the id alone
    broker = get_store().streams
    message = TaskMessage(id="legacy-1", task_name=GATED, queue="default",
                          payload={"k": "report"}, lock_key=lock_key(prefix),
                          unique_mode="until_finished", has_task_id=True)
    r.set(lock_key(prefix), "legacy-1", px=60_000)
    r.set(id_key(prefix, "legacy-1"), "legacy-1", px=60_000)
    open_gate(r, 1)
    broker.ensure_group("default")
    stream_id = broker.add("default", message.to_json())
    assert "tok" not in json.loads(message.to_json())

    # When a worker runs it
    acked = []
    executor = Executor(broker, "w", lambda queue, entry: acked.append(entry))
    executor.handle(Delivery("default", stream_id, message.to_json().encode()))

    # Then it freed both, as before
    assert acked == [stream_id]
    assert not r.exists(lock_key(prefix)) and not r.exists(id_key(prefix, "legacy-1"))
    # And a lock such a message holds names it as its holder
    r.set(lock_key(prefix), "legacy-2", px=60_000)
    with pytest.raises(TaskAlreadyDispatched) as held:
        dispatch(GATED, {"k": "report"})
    assert held.value.holder_id == "legacy-2"
