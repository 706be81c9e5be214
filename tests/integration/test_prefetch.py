"""A worker's reads grow past BATCH_SIZE while its tasks are short (PREFETCH_MS), and every
task still runs exactly once; PREFETCH_MS = 0 keeps each read at BATCH_SIZE."""

from __future__ import annotations

import pytest

from django_taskrunner import get_redis
from django_taskrunner.store import get_store
from django_taskrunner.worker.fetcher import PREFETCH_MAX
from tests.testapp.tasks import noop, runs_key
from tests.worker_helpers import app_monotonic, new_worker, wait_for, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)

TASKS = 3_000


def drain(**options: int) -> int:
    """Run TASKS short tasks through a worker; the read size it ended with."""
    noop.dispatch_many([{"n": n} for n in range(TASKS)])
    with worker_thread(concurrency=2, batch_size=2, **options) as worker:
        wait_for(lambda: get_redis().hlen(runs_key()) == TASKS, timeout=60)
        grown = worker.prefetch.size
    runs = get_redis().hgetall(runs_key())
    assert len(runs) == TASKS and set(runs.values()) == {b"1"}  # each exactly once
    assert get_store().streams.pending("default") == 0
    return grown


def test_short_tasks_grow_the_read_beyond_the_batch_size():
    assert 2 < drain() <= PREFETCH_MAX


def test_prefetch_ms_zero_keeps_the_batch_size():
    assert drain(prefetch_ms=0) == 2


def test_a_fetcher_waiting_for_room_sees_the_read_shrink_under_it():
    # Another fetcher's sample shrinks the read while this one waits for room for the
    # old, larger read: it must read once there is room for the new one, not wait for
    # room that can never come (a stall seen with four shards per worker).
    import threading


    worker = new_worker(["default"], concurrency=4, batch_size=10)
    prefetch, start = worker.prefetch, app_monotonic()
    prefetch.update(0, start - 1.0)
    worker.completed = 10_000
    prefetch.update(worker.completed, start - 0.9)  # 100,000 tasks/s
    assert prefetch.size == PREFETCH_MAX
    with worker._cond:
        worker.outstanding = 50  # room 50 < 100 (no pool threads before run()): it waits
    room: list[int] = []
    waiter = threading.Thread(target=lambda: room.append(worker.wait_for_room()), daemon=True)
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive()
    with worker._cond:
        for step in range(1, 21):  # then the pool finished nothing for a while
            prefetch.update(worker.completed, start + step)
        assert prefetch.size == 10
        worker.outstanding = 0  # room for a read of 10, never for one of 100
        worker._cond.notify_all()
    waiter.join(5)
    assert room == [10]
