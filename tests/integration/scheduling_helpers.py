"""Helpers for the scheduling tests: a worker running in a thread of the test process,
and polling for a condition with a deadline."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from django_taskrunner.runner import build_worker
from django_taskrunner.store import get_store
from django_taskrunner.worker.settings import worker_settings
from django_taskrunner.worker.worker import Worker
from tests.worker_helpers import wait_for  # noqa: F401 - re-exported for the scheduling tests


@contextmanager
def running_worker(*queues: str, scheduler: bool = True, lease: float = 10.0,
                   consumer: str | None = None, concurrency: int = 4) -> Iterator[Worker]:
    """A real Worker (fetchers, pool, acker, election, scheduler) on background threads."""
    worker = build_worker(get_store().streams, worker_settings(
        list(queues) or ["default"], concurrency=concurrency, batch_size=10, block_ms=200,
        shutdown_timeout=5, consumer=consumer, scheduler=scheduler, leader_lease=lease))
    thread = threading.Thread(target=worker.run, name=f"test-worker-{consumer}", daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.request_stop()
        thread.join(20)
        assert not thread.is_alive(), "worker did not stop"


def leads(worker: Worker) -> bool:
    return worker.scheduling is not None and worker.scheduling.election.is_leader
