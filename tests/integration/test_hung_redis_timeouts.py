"""`wait(id, timeout)` returns within its timeout (plus a small margin) and `lookup(id)`
within `SOCKET_TIMEOUT`, whatever Redis does: here a private server stopped by SIGSTOP,
which accepts connections (the kernel queues them) and never answers."""

from __future__ import annotations

import signal
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pytest

from django_taskrunner import RedisUnavailable, lookup, wait
from django_taskrunner.conf import reset
from tests.conftest import start_private_redis
from tests.testapp.tasks import noop

pytestmark = pytest.mark.django_db(transaction=True)

# Far longer than any bound checked here: returning before it shows nothing waited it out.
SOCKET_TIMEOUT = 10


@pytest.fixture
def hung_redis(taskrunner_settings: Any) -> Iterator[Any]:
    """A private redis-server the app points at; the test stops it (SIGCONT, then
    terminated, at the end)."""
    proc, url = start_private_redis(tempfile.mkdtemp(prefix="trtest-hung-wait-"))
    taskrunner_settings(REDIS_URL=url, SOCKET_TIMEOUT=SOCKET_TIMEOUT, CONNECT_TIMEOUT=5)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        proc.wait(10)


def timed(call: Any) -> tuple[float, BaseException | None]:
    started = time.monotonic()
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the test looks at what it was
        return time.monotonic() - started, exc
    return time.monotonic() - started, None


@pytest.mark.parametrize("connected", [True, False], ids=["open-connection", "new-connection"])
def test_wait_returns_within_its_timeout_when_redis_hangs(hung_redis, connected):
    message = noop.dispatch({"n": 1})
    assert lookup(message.id).status == "queued"
    if not connected:
        reset()  # the next call opens a new connection, to the stopped server
    hung_redis.send_signal(signal.SIGSTOP)
    elapsed, error = timed(lambda: wait(message.id, timeout=0.5))
    print(f"wait(id, 0.5) on a stopped Redis, {'open' if connected else 'new'} connection: "
          f"{type(error).__name__} after {elapsed:.2f}s")
    assert isinstance(error, RedisUnavailable), error
    assert elapsed < 3.0  # 0.5 s and a small margin; 10 s (SOCKET_TIMEOUT) before


def test_a_wait_cut_short_by_a_hang_mid_wait_still_returns_in_time(hung_redis):
    message = noop.dispatch({"n": 1})
    elapsed, error = timed(lambda: wait(message.id, timeout=0.3))
    assert isinstance(error, TimeoutError) and not isinstance(error, RedisUnavailable)
    hung_redis.send_signal(signal.SIGSTOP)
    elapsed, error = timed(lambda: wait(message.id, timeout=1.5))
    assert isinstance(error, RedisUnavailable), error
    assert elapsed < 4.0


def test_lookup_returns_within_the_socket_timeout_when_redis_hangs(hung_redis):
    message = noop.dispatch({"n": 1})
    hung_redis.send_signal(signal.SIGSTOP)
    elapsed, error = timed(lambda: lookup(message.id))
    print(f"lookup(id) on a stopped Redis (SOCKET_TIMEOUT {SOCKET_TIMEOUT}s): "
          f"{type(error).__name__} after {elapsed:.2f}s")
    assert isinstance(error, RedisUnavailable), error
    assert elapsed < SOCKET_TIMEOUT + 3
