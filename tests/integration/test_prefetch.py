"""A worker's reads grow past BATCH_SIZE while its tasks are short (PREFETCH_MS), and every
task still runs exactly once; PREFETCH_MS = 0 keeps each read at BATCH_SIZE."""

from __future__ import annotations

import pytest

from django_taskrunner.store.broker import get_broker
from django_taskrunner.store.connection import get_redis
from django_taskrunner.worker.prefetch import PREFETCH_MAX
from tests.testapp.tasks import noop, runs_key
from tests.worker_helpers import wait_for, worker_thread

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
    assert get_broker().pending("default") == 0
    return grown


def test_short_tasks_grow_the_read_beyond_the_batch_size():
    assert 2 < drain() <= PREFETCH_MAX


def test_prefetch_ms_zero_keeps_the_batch_size():
    assert drain(prefetch_ms=0) == 2
