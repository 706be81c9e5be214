"""Helpers for the scheduling tests: a worker running in a thread of the test process,
and polling for a condition with a deadline."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django_taskrunner.broker import get_broker
from django_taskrunner.worker import Worker


@contextmanager
def running_worker(*queues: str, scheduler: bool = True, lease: float = 10.0,
                   consumer: str | None = None, concurrency: int = 4) -> Iterator[Worker]:
    """A real Worker (fetchers, pool, acker, election, scheduler) on background threads."""
    worker = Worker(get_broker(), list(queues) or ["default"], concurrency=concurrency,
                    batch_size=10, block_ms=200, shutdown_timeout=5, consumer=consumer,
                    scheduler=scheduler, leader_lease=lease)
    thread = threading.Thread(target=worker.run, name=f"test-worker-{consumer}", daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.request_stop()
        thread.join(20)
        assert not thread.is_alive(), "worker did not stop"


def wait_for(condition: Callable[[], Any], timeout: float, interval: float = 0.02) -> Any:
    """Poll `condition` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)


def leads(worker: Worker) -> bool:
    return worker.scheduling is not None and worker.scheduling.election.is_leader
