"""A Redis that answers but refuses writes with a reply code redis-py has no class for
(`NOREPLICAS`: `min-replicas-to-write` not met) is a refusal, as `OOM` is (tested in
tests/chaos/test_redis_oom.py), in a pipeline too (docs/reliability.md, "When finished
tasks cannot be acked")."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from django_taskrunner.conf import reset
from django_taskrunner.store.errors import refuses_writes, stalls_writes
from tests.conftest import start_private_redis

pytestmark = pytest.mark.django_db(transaction=True)


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
