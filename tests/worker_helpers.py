"""Helpers for tests that need a long-running worker in this process, and to wait."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from django_taskrunner.store.broker import get_broker
from django_taskrunner.worker.settings import worker_settings
from django_taskrunner.worker.worker import Worker


def wait_for(predicate: Callable[[], Any], timeout: float = 15.0, step: float = 0.02) -> Any:
    """Poll until `predicate()` is truthy; returns its value, or fails the test."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(step)


@contextlib.contextmanager
def worker_thread(queues: tuple[str, ...] = ("default",), **options: Any) -> Iterator[Worker]:
    """A `Worker` running in a background thread until the block ends (graceful stop)."""
    settings = {"concurrency": 2, "batch_size": 10, "block_ms": 100, "shutdown_timeout": 5}
    worker = Worker(get_broker(), worker_settings(queues, **{**settings, **options}))
    thread = threading.Thread(target=worker.run, name="test-worker", daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.request_stop()
        thread.join(20)
        assert not thread.is_alive(), "the worker did not stop"
