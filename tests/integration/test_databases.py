"""What the database does differently, run on SQLite and on PostgreSQL alike (scripts/test
runs this file on both): FailedTask rows written by several workers at the same moment,
`dispatch_on_commit` inside nested atomic blocks, and PeriodicTask rows edited while a
worker runs them."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection, transaction

from django_taskrunner import TaskMessage, dispatch_on_commit
from django_taskrunner.models import FailedTask, PeriodicTask
from django_taskrunner.scheduling.periodic import RELOAD_SECONDS
from django_taskrunner.worker.failures import record_failure
from tests.testapp.tasks import noop, runs_key
from tests.worker_helpers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

WORKERS = 6
handled: list[str] = []


def remember(message: Any, error: BaseException) -> None:
    """FAILED_TASK_HANDLER of these tests."""
    handled.append(message.id)


def _message(message_id: str) -> TaskMessage:
    return TaskMessage(id=message_id, task_name="tests.testapp.tasks.always_fails",
                       queue="default", payload={"n": 1},
                       dispatch_token="token-1")  # noqa: S106 - not a password


def test_failed_task_rows_of_workers_racing_are_one_per_dispatch(taskrunner_settings):
    taskrunner_settings(FAILED_TASK_HANDLER=f"{__name__}.remember")
    handled.clear()
    start = threading.Barrier(WORKERS)
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        try:
            start.wait(10)
            # Every worker records the same replayed message, and one of its own.
            record_failure(_message("shared"), RuntimeError("boom"), attempts=3,
                           worker=f"w{index}")
            record_failure(_message(f"own-{index}"), RuntimeError("boom"), attempts=3,
                           worker=f"w{index}")
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            connection.close()  # each thread's own database connection

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(WORKERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert FailedTask.objects.filter(message_id="shared").count() == 1
    assert FailedTask.objects.count() == WORKERS + 1
    assert sorted(handled) == sorted(["shared", *(f"own-{i}" for i in range(WORKERS))])


def _queued(r: Any, prefix: str) -> list[int]:
    entries = r.xrange(f"{prefix}:{{default}}:stream")
    return [TaskMessage.from_json(fields[b"m"]).payload["n"] for _id, fields in entries]


def test_dispatch_on_commit_in_nested_atomic_blocks_sends_what_the_outer_commit_keeps(
        r, prefix):
    with transaction.atomic():
        dispatch_on_commit(noop, {"n": 1})
        with transaction.atomic():  # a savepoint that is released: kept
            dispatch_on_commit(noop, {"n": 2})
        with pytest.raises(RuntimeError), transaction.atomic():  # rolled back: dropped
            dispatch_on_commit(noop, {"n": 3})
            raise RuntimeError
        with transaction.atomic():
            with pytest.raises(RuntimeError), transaction.atomic():
                dispatch_on_commit(noop, {"n": 4})
                raise RuntimeError
            dispatch_on_commit(noop, {"n": 5})
        assert _queued(r, prefix) == []  # nothing before the outer commit
    assert _queued(r, prefix) == [1, 2, 5]

    with pytest.raises(RuntimeError), transaction.atomic():
        with transaction.atomic():
            dispatch_on_commit(noop, {"n": 6})
        raise RuntimeError  # the outer block rolls back: the released savepoint too
    assert _queued(r, prefix) == [1, 2, 5]


def test_a_periodic_task_row_edited_while_a_worker_runs_it(r, spawn_worker):
    row = PeriodicTask.objects.create(name="edited", task_name="tests.testapp.tasks.count_by_id",
                                      interval=1, payload={"v": 1})
    spawn_worker("--consumer-name", "w1")

    def runs() -> int:
        return sum(int(count) for count in r.hgetall(runs_key()).values())

    wait_for(lambda: runs() >= 1, 20, 0.1)
    with transaction.atomic():  # an edit in a transaction of its own, as the admin does
        if connection.vendor == "sqlite":
            # No row locks (FOR UPDATE is ignored), and a transaction that reads before
            # it writes is refused at once ("database is locked", no busy wait) when
            # the worker's write of the row's last run waits on that read: it writes
            # first, only what it changes.
            edited = row
            edited.enabled = False
            edited.save(update_fields=["enabled", "updated_at"])
        else:  # the row locked while the worker writes its last run
            edited = PeriodicTask.objects.select_for_update().get(pk=row.pk)
            edited.enabled = False
            edited.save()
    wait_for(lambda: PeriodicTask.objects.get(pk=row.pk).enabled is False, 5)
    # The worker rereads the table when the change is announced (pub/sub, which a
    # subscriber still connecting misses), at the latest RELOAD_SECONDS later: from then
    # on, no more runs happen.
    settled = wait_for(lambda: _stable(runs), RELOAD_SECONDS + 15, 0.1)
    assert settled
    row.refresh_from_db()
    assert row.last_run_at is not None


def _stable(count: Any) -> bool:
    """Whether `count()` stays the same for 2.5 s (more than two intervals)."""
    before = count()
    time.sleep(2.5)
    return count() == before
