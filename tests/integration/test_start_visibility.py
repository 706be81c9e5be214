"""A started task reads "running" (with its worker) from inside its own code, by its
start write rather than a heartbeat, and its progress is readable while it runs
(docs/records.md, "Looking a task up")."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from django_taskrunner import get_redis, lookup, task, wait
from django_taskrunner.worker import keepalive
from tests.testapp.tasks import runs_key
from tests.worker_helpers import wait_for, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "start_visibility"  # no other task of the suite: nothing shortens the heartbeat


@task(queue=QUEUE, takes_context=True)
def reads_itself_running(ctx: Any, payload: Any) -> None:
    """Reads its own record until it says "running" (20 s at most), and keeps what it saw
    last; a start write lands within milliseconds."""
    deadline = time.monotonic() + 20
    record = lookup(ctx.id)
    while (record is None or record.status != "running") and time.monotonic() < deadline:
        time.sleep(0.005)
        record = lookup(ctx.id)
    seen = {"status": record.status, "worker": record.worker,
            "started": record.started_at is not None} if record else None
    get_redis().hset(runs_key(), f"seen:{ctx.id}", json.dumps(seen))


@task(takes_context=True)
def reports_then_waits(ctx: Any, payload: Any) -> None:
    """Sets its progress, then waits until the test saw it (or a minute passed)."""
    ctx.set_progress({"step": 1})
    redis = get_redis()
    deadline = time.monotonic() + 60
    while not redis.exists(f"{runs_key()}:seen:{ctx.id}") and time.monotonic() < deadline:
        time.sleep(0.02)


def seen_by(r: Any, task_id: str) -> dict[str, Any] | None:
    raw = r.hget(runs_key(), f"seen:{task_id}")
    return None if raw is None else json.loads(raw)


@pytest.mark.parametrize("concurrency", [1, 8])
def test_a_task_reads_itself_running_with_its_worker_without_a_heartbeat(
    r, monkeypatch, concurrency,
):
    # No heartbeat within the test (once an hour at most): what the task reads can only
    # come from its start write. Before it existed, "running" rode the heartbeat, so
    # here a task read "queued" until it gave up.
    monkeypatch.setattr(keepalive, "CANCEL_CHECK_S", 3600.0)
    monkeypatch.setattr(keepalive, "MAX_INTERVAL", 3600.0)
    messages = reads_itself_running.dispatch_many([{"n": n} for n in range(12)])
    with worker_thread(queues=(QUEUE,), concurrency=concurrency,
                       reservation_timeout=36_000) as worker:
        for message in messages:
            assert wait(message.id, timeout=60).status == "succeeded"
    for message in messages:
        assert seen_by(r, message.id) == {"status": "running", "worker": worker.consumer,
                                          "started": True}, message.id


def test_progress_is_readable_while_the_task_runs(r):
    message = reports_then_waits.dispatch({})
    with worker_thread():
        record = wait_for(lambda: (rec := lookup(message.id)) and rec.progress and rec)
        assert record.status == "running" and record.progress == {"step": 1}
        r.set(f"{runs_key()}:seen:{message.id}", 1)
        assert wait(message.id, timeout=30).status == "succeeded"
