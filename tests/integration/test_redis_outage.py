"""When Redis cannot be reached, dispatch() fails fast with RedisUnavailable, and the
worker's threads log the outage once. (Workers riding out a real outage: tests/chaos.)"""

from __future__ import annotations

import json
import logging
import signal
import socket
import tempfile
import time

import pytest
import redis

from django_taskrunner import RedisUnavailable, TaskIdConflict, TaskRunnerError, dispatch
from django_taskrunner.store import keys
from django_taskrunner.worker.outage import RedisStatus, backoff
from tests.conftest import start_private_redis
from tests.testapp.tasks import noop
from tests.worker_helpers import wait_for


def test_dispatch_with_nothing_listening_raises_redis_unavailable_at_once(taskrunner_settings):
    with socket.socket() as held:  # bound, never listening: refused, and no one else's
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        # Timeouts far longer than the test: raising before them shows nothing waited.
        taskrunner_settings(REDIS_URL=f"redis://127.0.0.1:{port}/0", CONNECT_TIMEOUT=120,
                            SOCKET_TIMEOUT=120)
        started = time.monotonic()
        with pytest.raises(RedisUnavailable) as caught:
            dispatch(noop, {"n": 1})
        assert time.monotonic() - started < 60  # a refused connection is not retried
    assert isinstance(caught.value, TaskRunnerError)
    assert "tests.testapp.tasks.noop" in str(caught.value)
    assert caught.value.maybe_queued is False  # refused: nothing was sent
    assert "it was not queued: the command was never sent" in str(caught.value)


def connections_received(url: str) -> int:
    """Connections the server accepted so far, this probe's own included."""
    probe = redis.Redis.from_url(url)
    try:
        return int(probe.info("stats")["total_connections_received"])
    finally:
        probe.close()


def test_dispatch_to_a_hung_redis_fails_after_one_socket_timeout(taskrunner_settings):
    # Given a Redis that accepts connections but never answers (SIGSTOP)
    workdir = tempfile.mkdtemp(prefix="trtest-hung-")
    proc, url = start_private_redis(workdir)
    taskrunner_settings(REDIS_URL=url, SOCKET_TIMEOUT=0.5, CONNECT_TIMEOUT=0.5)
    before = connections_received(url)
    proc.send_signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(RedisUnavailable):
            dispatch(noop, {"n": 1})
        elapsed = time.monotonic() - started
    finally:
        proc.send_signal(signal.SIGCONT)
    try:
        # One attempt, not one per retry: the kernel queued each connection attempt while
        # the server was stopped, and it accepts them, in order, before the next probe.
        assert connections_received(url) - before == 2  # the dispatch's, and the probe's
        assert elapsed >= 0.45  # it did wait for the socket timeout
    finally:
        proc.terminate()
        proc.wait(10)


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


# -- RedisUnavailable.maybe_queued: "certainly not queued" or "unknown" ----------------------


@pytest.fixture
def own_redis(taskrunner_settings):
    """A private redis-server the test may stop; the app points at it (1 s timeouts)."""
    workdir = tempfile.mkdtemp(prefix="trtest-own-")
    proc, url = start_private_redis(workdir)
    taskrunner_settings(REDIS_URL=url, SOCKET_TIMEOUT=1, CONNECT_TIMEOUT=1)
    yield proc, url
    proc.send_signal(signal.SIGCONT)
    proc.terminate()
    proc.wait(10)


def queued_ids(url: str, prefix: str) -> set[str]:
    client = redis.Redis.from_url(url)
    try:
        return {json.loads(fields[b"m"])["id"]
                for _id, fields in client.xrange(keys.stream_key(prefix, "default"))}
    finally:
        client.close()


def test_a_timeout_after_sending_says_the_task_may_be_queued_and_a_task_id_retry_is_safe(
    own_redis, prefix
):
    proc, url = own_redis
    dispatch(noop, {"n": 0}, task_id="warm-up")  # a connection is open, the script loaded
    proc.send_signal(signal.SIGSTOP)
    raised: dict[str, RedisUnavailable] = {}
    try:
        for n in range(4):
            with pytest.raises(RedisUnavailable) as caught:
                dispatch(noop, {"n": n}, task_id=f"t{n}")
            raised[f"t{n}"] = caught.value
    finally:
        proc.send_signal(signal.SIGCONT)
    # The first went out on the open connection: Redis got it, only the reply was lost.
    assert raised["t0"].maybe_queued is True
    assert "it may have been queued" in str(raised["t0"])
    wait_for(lambda: "t0" in queued_ids(url, prefix))
    # Every dispatch that said "not queued" was indeed not queued.
    queued = queued_ids(url, prefix) - {"warm-up"}
    assert queued <= {task_id for task_id, exc in raised.items() if exc.maybe_queued}
    # Retrying with the same task_id is safe: a conflict means the first attempt was queued.
    for task_id in raised:
        if task_id in queued:
            with pytest.raises(TaskIdConflict):
                dispatch(noop, {"retry": task_id}, task_id=task_id)
        else:
            dispatch(noop, {"retry": task_id}, task_id=task_id)
    assert queued_ids(url, prefix) == {"warm-up", "t0", "t1", "t2", "t3"}


def test_a_stopped_server_says_the_task_was_not_queued(own_redis):
    proc, _url = own_redis
    dispatch(noop, {"n": 0})  # a pooled connection to the server that goes away
    proc.terminate()
    proc.wait(10)
    for _ in range(2):
        with pytest.raises(RedisUnavailable) as caught:
            dispatch(noop, {"n": 1})
        assert caught.value.maybe_queued is False
        with pytest.raises(RedisUnavailable) as caught:
            dispatch(noop, {"n": 2}, task_id="after-stop")  # the script path too
        assert caught.value.maybe_queued is False
