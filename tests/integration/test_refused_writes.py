"""A Redis that answers but refuses writes, with a reply code redis-py has no class for
(`NOREPLICAS`: `min-replicas-to-write` not met) or with `READONLY` (it became a replica,
which also unblocks the fetchers' blocked reads), is ridden out like `OOM` (tested in
tests/chaos/test_redis_oom.py): the worker logs it, starts nothing while its acks are
refused, and once Redis takes writes again every task has run once, its record is
final, no failed row was written and nothing is pending (docs/reliability.md, "When
finished tasks cannot be acked")."""

from __future__ import annotations

import socket
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from django_taskrunner import lookup, task
from django_taskrunner.conf import get_settings, reset
from django_taskrunner.models import FailedTask
from django_taskrunner.store import get_store, keys
from django_taskrunner.store.errors import refuses_writes, stalls_writes
from tests.conftest import start_private_redis
from tests.worker_helpers import wait_for, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)

TASKS = 300
REFUSED_S = 3.0
RUNS: Counter[int] = Counter()  # runs per task number (the worker runs in this process)
RUNS_LOCK = threading.Lock()


@task(name="tests.refused_writes.sleeps")
def sleeps(payload: Any) -> None:
    """20 ms of work, counted here: the refusing Redis could not count it."""
    time.sleep(0.02)
    with RUNS_LOCK:
        RUNS[payload["n"]] += 1


@pytest.fixture
def private_redis(taskrunner_settings: Any) -> Iterator[redis.Redis]:
    """A private redis-server the app points at (the test makes it refuse writes)."""
    proc, url = start_private_redis(tempfile.mkdtemp(prefix="trtest-refused-"))
    taskrunner_settings(REDIS_URL=url)
    reset()
    client = redis.Redis.from_url(url)
    try:
        yield client
    finally:
        client.close()
        proc.terminate()
        proc.wait(10)


def test_a_refusal_in_a_pipeline_is_a_refusal_and_bad_data_is_not(private_redis):
    """redis-py wraps an error reply met in a pipeline ("Command # 1 (XREADGROUP ...) of
    pipeline caused error: NOREPLICAS ..."): the code is still read, so the fetchers'
    pipelined reads ride the refusal out instead of their thread dying."""
    private_redis.rpush("a-list", "x")
    private_redis.config_set("min-replicas-to-write", 1)
    pipe = private_redis.pipeline(transaction=False)
    pipe.set("probe", 1)
    with pytest.raises(redis.ResponseError) as refused:
        pipe.execute()
    private_redis.config_set("min-replicas-to-write", 0)
    pipe.hset("a-list", "field", 1)  # WRONGTYPE: a key of another type
    with pytest.raises(redis.ResponseError) as wrong_type:
        pipe.execute()
    assert str(refused.value).startswith("Command # 1 (SET")
    assert refuses_writes(refused.value) and stalls_writes(refused.value)
    assert "WRONGTYPE" in str(wrong_type.value)
    assert not refuses_writes(wrong_type.value) and not stalls_writes(wrong_type.value)


def test_a_refusal_met_inside_a_script_is_a_refusal_and_bad_data_is_not(private_redis):
    """A write a script's redis.call makes, refused: Redis 7 replies with the code as is,
    Redis 6.2 wraps it ("Error running script (call to f_...): @user_script:1: ...
    -NOREPLICAS ..."). Either way it is a refusal (the heartbeat's and the acker's scripts
    ride it out), and a script's WRONGTYPE stays bad data."""
    private_redis.rpush("a-list", "x")
    write = "return redis.call('SET', KEYS[1], '1')"
    private_redis.config_set("min-replicas-to-write", 1)
    try:
        for client in (private_redis, private_redis.pipeline(transaction=False)):
            with pytest.raises(redis.ResponseError) as refused:
                client.eval(write, 1, "probe")
                if client is not private_redis:
                    client.execute()
            assert "NOREPLICAS" in str(refused.value)
            assert refuses_writes(refused.value) and stalls_writes(refused.value)
    finally:
        private_redis.config_set("min-replicas-to-write", 0)
    with pytest.raises(redis.ResponseError) as wrong_type:
        private_redis.eval("return redis.call('HSET', KEYS[1], 'f', '1')", 1, "a-list")
    assert "WRONGTYPE" in str(wrong_type.value)
    assert not refuses_writes(wrong_type.value) and not stalls_writes(wrong_type.value)


def refuse_writes(client: redis.Redis, how: str) -> None:
    """Make the server refuse every write: `NOREPLICAS` (`min-replicas-to-write` unmet),
    or `READONLY` (it became the replica of a primary that cannot be reached, as after a
    failover that went the other way; it keeps its data, and unblocks blocked reads)."""
    if how == "NOREPLICAS":
        client.config_set("min-replicas-to-write", 1)
    else:
        client.replicaof("127.0.0.1", free_port())


def take_writes(client: redis.Redis, how: str) -> None:
    if how == "NOREPLICAS":
        client.config_set("min-replicas-to-write", 0)
    else:
        client.replicaof("NO", "ONE")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("how", ["NOREPLICAS", "READONLY"])
def test_a_redis_refusing_writes_loses_nothing_and_runs_nothing_twice(
        private_redis, caplog, how):
    RUNS.clear()
    ids = [sleeps.dispatch({"n": n}).id for n in range(TASKS)]
    stream = keys.stream_key(get_store().prefix, "default")
    group = get_settings().CONSUMER_GROUP
    with worker_thread(concurrency=4) as worker:
        wait_for(lambda: sum(RUNS.values()) >= 50, timeout=30)
        # Writes refused for 3 s: every write command answers NOREPLICAS (or READONLY)
        refuse_writes(private_redis, how)
        with pytest.raises(redis.ResponseError) as refused:
            private_redis.set("probe", 1)
        assert refuses_writes(refused.value), refused.value  # redis-py: ReadOnlyError
        time.sleep(0.5)  # the running tasks end and their acks are refused
        ran_before = sum(RUNS.values())
        time.sleep(REFUSED_S - 0.5)
        ran_during = sum(RUNS.values()) - ran_before
        take_writes(private_redis, how)

        wait_for(lambda: len(RUNS) == TASKS, timeout=60)
        wait_for(lambda: private_redis.xpending(stream, group)["pending"] == 0, timeout=30)
        wait_for(lambda: all(lookup(task_id).status == "succeeded" for task_id in ids),
                 timeout=30)
        assert worker.acker.is_alive()
    print(f"{how} tasks={TASKS} ran_in_the_last_{REFUSED_S - 0.5:g}s_of_refusal="
          f"{ran_during} run_twice={sum(1 for c in RUNS.values() if c > 1)} "
          f"failed_rows={FailedTask.objects.count()}")
    refusals = caplog.text.count("Redis refuses writes")
    print(f"refusal lines logged: {refusals}; tracebacks logged: "
          f"{sum(1 for record in caplog.records if record.exc_info)}")
    assert refusals >= 1
    # a refusal is an outage: logged without a traceback, by every thread
    assert not [record.getMessage() for record in caplog.records if record.exc_info]
    assert ran_during == 0  # nothing started once its acks were refused
    assert sorted(RUNS) == list(range(TASKS)) and set(RUNS.values()) == {1}
    assert FailedTask.objects.count() == 0
