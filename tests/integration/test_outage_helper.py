"""redis_call: the one retry-while-Redis-is-down loop of the worker and of runtasks."""

from __future__ import annotations

import logging
import socket

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from django_taskrunner.worker.outage import RedisStatus, redis_call


def unreachable_client() -> redis.Redis:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return redis.Redis(port=port, socket_connect_timeout=0.2, socket_timeout=0.2,
                       retry=Retry(NoBackoff(), 0))


def test_it_retries_while_redis_is_down_and_logs_the_outage_once(r, caplog):
    # Given a call that reaches Redis only from its third try on
    dead, tries, waits = unreachable_client(), [], []

    def ping() -> bool:
        tries.append(1)
        return (dead if len(tries) < 3 else r).ping()

    def wait(seconds: float, failures: int) -> bool:
        waits.append((seconds, failures))
        return False

    # When it is called through redis_call
    with caplog.at_level(logging.WARNING, logger="django_taskrunner.worker.outage"):
        result = redis_call(ping, status=RedisStatus(), doing="pinging", wait=wait)

    # Then it got the answer, waited a growing backoff between tries, and said so once
    assert result is True
    assert waits == [(0.1, 1), (0.2, 2)]
    down = [rec for rec in caplog.records if "unreachable" in rec.getMessage()]
    back = [rec for rec in caplog.records if "reachable again" in rec.getMessage()]
    assert len(down) == 1 and "while pinging" in down[0].getMessage()
    assert len(back) == 1


def test_it_gives_up_when_wait_says_so_and_tries_once_without_wait():
    dead = unreachable_client()
    status = RedisStatus(meanwhile="waiting for it")
    assert redis_call(dead.ping, status=status, doing="x", wait=lambda s, n: n >= 2) is None
    assert status.down
    assert redis_call(dead.ping, status=status, doing="x") is None
