"""A worker's Redis pool has room for one connection per fetcher and thread: redis-py 8
caps a pool at 100 connections by default, and a worker on 110 queues needs more (each
fetcher's blocking read holds one). A cap the user set is kept, and logged."""

from __future__ import annotations

import logging

import pytest
import redis
from redis.exceptions import MaxConnectionsError

from django_taskrunner import RedisUnavailable, dispatch, get_redis
from django_taskrunner.store.connection import make_room
from django_taskrunner.worker.outage import RedisStatus
from tests.testapp.tasks import noop, runs_key
from tests.worker_helpers import wait_for, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)

QUEUES = tuple(f"many-{n}" for n in range(110))


def test_a_worker_on_110_queues_runs_a_task_of_each(r):
    for queue in QUEUES:
        dispatch(noop, {"n": queue}, queue=queue)
    with worker_thread(QUEUES, concurrency=2, block_ms=200):
        wait_for(lambda: r.hlen(runs_key()) == len(QUEUES), timeout=60)
    assert get_redis().connection_pool.max_connections >= len(QUEUES) + 2
    assert {int(count) for count in r.hvals(runs_key())} == {1}


def test_a_cap_set_in_the_url_is_kept_and_logged(redis_url, caplog, taskrunner_settings):
    url = f"{redis_url}{'&' if '?' in redis_url else '?'}max_connections=5"
    taskrunner_settings(REDIS_URL=url)
    client = redis.Redis.from_url(url)
    client._taskrunner_owned = True
    with caplog.at_level(logging.WARNING, logger="django_taskrunner.store.connection"):
        make_room(client, 50)
    assert client.connection_pool.max_connections == 5
    assert "allows 5 connections; this worker needs about 50" in caplog.text


def test_a_full_pool_is_named_as_such_not_as_redis_being_down(redis_url, taskrunner_settings):
    url = f"{redis_url}{'&' if '?' in redis_url else '?'}max_connections=1"
    taskrunner_settings(REDIS_URL=url)
    held = get_redis().connection_pool.get_connection()
    try:
        with pytest.raises(RedisUnavailable) as raised:
            dispatch(noop, {"n": "full"})
    finally:
        get_redis().connection_pool.release(held)
    assert "connection pool is full" in str(raised.value)
    assert "max_connections" in str(raised.value)
    assert raised.value.maybe_queued is False  # refused before anything was sent
    dispatch(noop, {"n": "room again"})  # and works once there is room


def test_a_worker_logs_a_full_pool_as_such(caplog):
    with caplog.at_level(logging.ERROR, logger="django_taskrunner.worker.outage"):
        RedisStatus("its work waits").failed(MaxConnectionsError("Too many connections"),
                                             "reading queue default")
    assert "connection pool is full" in caplog.text
    assert "Redis is unreachable" not in caplog.text
