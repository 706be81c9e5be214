"""Helpers for tests that need a long-running worker in this process, and to wait."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from django_taskrunner.core import clock
from django_taskrunner.runner import build_worker
from django_taskrunner.store import get_store
from django_taskrunner.worker.settings import worker_settings
from django_taskrunner.worker.worker import Worker


def age_pending(client: Any, stream: str, group: str, seconds: float,
                consumer: str | None = None) -> int:
    """Make the pending entries of `stream` (those `consumer` holds, if given) look idle for
    `seconds`, as if their holder had died that long ago: Redis measures the idle time
    itself, so tests set it on the server (XCLAIM to the same consumer with IDLE, JUSTID:
    the delivery counter stays) instead of sleeping. Returns how many entries were aged."""
    rows = client.xpending_range(stream, group, "-", "+", 10_000, consumername=consumer)
    for row in rows:
        client.xclaim(stream, group, row["consumer"], 0, [row["message_id"]],
                      idle=int(seconds * 1000), justid=True)
    return len(rows)


class MovableClock:
    """The app's clock (`django_taskrunner.core.clock`) plus an offset a test moves forward:
    what the app compares with its clock then happens at once, however busy the machine.
    Install it with `MovableClock.install(monkeypatch)`."""

    def __init__(self) -> None:
        self.offset = 0.0
        self._monotonic = clock.monotonic
        self._now_ms = clock.now_ms

    @classmethod
    def install(cls, monkeypatch: Any) -> MovableClock:
        moved = cls()
        monkeypatch.setattr(clock, "monotonic", moved.monotonic)
        monkeypatch.setattr(clock, "now_ms", moved.now_ms)
        return moved

    def advance(self, seconds: float) -> None:
        self.offset += seconds

    def monotonic(self) -> float:
        return self._monotonic() + self.offset

    def now_ms(self) -> int:
        return self._now_ms() + int(self.offset * 1000)


def app_now_ms() -> int:
    """The app's clock in epoch ms (`clock.now_ms`, moved if a test moved it): the one
    seam tests read the app's time through, so moving the clock module breaks one helper."""
    return clock.now_ms()


def app_monotonic() -> float:
    """The app's monotonic clock (`clock.monotonic`, moved if a test moved it)."""
    return clock.monotonic()


def set_app_clock(monkeypatch: Any, *, now_ms: Callable[[], int] | None = None,
                  monotonic: Callable[[], float] | None = None) -> None:
    """Replace the app's clock functions for one test (undone by `monkeypatch`)."""
    if now_ms is not None:
        monkeypatch.setattr(clock, "now_ms", now_ms)
    if monotonic is not None:
        monkeypatch.setattr(clock, "monotonic", monotonic)


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


def new_worker(queues: tuple[str, ...] | list[str] = ("default",), **options: Any) -> Worker:
    """A `Worker` of the current store with these `runtasks` options, not started."""
    return build_worker(get_store().streams, worker_settings(queues, **options))


@contextlib.contextmanager
def worker_thread(queues: tuple[str, ...] = ("default",), **options: Any) -> Iterator[Worker]:
    """A `Worker` running in a background thread until the block ends (graceful stop)."""
    settings = {"concurrency": 2, "batch_size": 10, "block_ms": 100, "shutdown_timeout": 5}
    worker = build_worker(get_store().streams, worker_settings(queues, **{**settings, **options}))
    thread = threading.Thread(target=worker.run, name="test-worker", daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.request_stop()
        thread.join(20)
        assert not thread.is_alive(), "the worker did not stop"


def exit_code_of(worker: Worker, timeout: float = 30.0) -> int | None:
    """Run `worker` on a thread until it stops by itself (a thread of its died, say);
    its exit code, or None when it was still running after `timeout` (then stopped)."""
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(worker.run()), daemon=True)
    thread.start()
    thread.join(timeout)
    ran_on = thread.is_alive()
    worker.request_stop()
    thread.join(20)
    return None if ran_on or not codes else codes[0]
