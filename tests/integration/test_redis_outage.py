"""When Redis cannot be reached, dispatch() fails fast with RedisUnavailable, and the
worker's threads log the outage once. (Workers riding out a real outage: tests/chaos.)"""

from __future__ import annotations

import logging
import signal
import tempfile
import time

import pytest

from django_taskrunner import RedisUnavailable, TaskRunnerError, dispatch
from django_taskrunner.worker.outage import RedisStatus, backoff
from tests.conftest import _free_port, start_private_redis
from tests.testapp.tasks import noop


def test_dispatch_with_nothing_listening_raises_redis_unavailable_at_once(taskrunner_settings):
    taskrunner_settings(REDIS_URL=f"redis://127.0.0.1:{_free_port()}/0")
    started = time.monotonic()
    with pytest.raises(RedisUnavailable) as caught:
        dispatch(noop, {"n": 1})
    assert time.monotonic() - started < 3  # a refused connection is not retried for minutes
    assert isinstance(caught.value, TaskRunnerError)
    assert "tests.testapp.tasks.noop" in str(caught.value)


def test_dispatch_to_a_hung_redis_fails_after_the_socket_timeout(taskrunner_settings):
    # Given a Redis that accepts connections but never answers (SIGSTOP)
    workdir = tempfile.mkdtemp(prefix="trtest-hung-")
    proc, url = start_private_redis(workdir)
    taskrunner_settings(REDIS_URL=url, SOCKET_TIMEOUT=0.5, CONNECT_TIMEOUT=0.5)
    proc.send_signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(RedisUnavailable):
            dispatch(noop, {"n": 1})
        elapsed = time.monotonic() - started
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        proc.wait(10)
    # one socket timeout, not one per retry
    assert 0.4 < elapsed < 3


def test_an_outage_is_logged_once_when_it_starts_and_once_when_it_ends(caplog):
    status = RedisStatus()
    with caplog.at_level(logging.WARNING, logger="django_taskrunner.worker.outage"):
        for doing in ("reading queue default", "acking finished tasks", "sending heartbeats"):
            status.failed(ConnectionError("refused"), doing)
        status.succeeded()
        status.succeeded()
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2
    assert "Redis is unreachable" in messages[0] and "reading queue default" in messages[0]
    assert "reachable again" in messages[1]
    assert not status.down


def test_retries_back_off_doubling_up_to_two_seconds():
    assert [backoff(n) for n in (1, 2, 3, 4, 5, 6, 10)] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
