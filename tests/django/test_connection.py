"""Where the Redis client comes from: REDIS_URL, or a django-redis cache alias."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_taskrunner import get_redis
from django_taskrunner.conf import get_settings
from tests.testapp.tasks import noop


def test_a_django_redis_cache_alias_is_used_as_the_connection(settings, redis_url, prefix):
    settings.CACHES = {
        "tasks": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": redis_url},
    }
    settings.TASKRUNNER = {"CONNECTION": "tasks", "PREFIX": prefix}
    from django_redis import get_redis_connection

    assert get_redis() is get_redis_connection("tasks")
    noop.dispatch({"n": 1})
    assert get_redis_connection("tasks").xlen(f"{prefix}:{{default}}:stream") == 1


@pytest.mark.parametrize("args", [
    ["--concurrency", "0"], ["--batch-size", "x"], ["--queue", "a:b"], ["--log-level", "LOUD"],
])
def test_runtasks_refuses_bad_options(args):
    with pytest.raises(CommandError):
        call_command("runtasks", "--burst", *args)


def test_a_redis_url_of_a_plain_server_keeps_the_plain_client(r):
    from redis.cluster import RedisCluster

    client = get_redis()
    assert not isinstance(client, RedisCluster)
    noop.dispatch({"n": 1})
    assert r.xlen(f"{get_settings().PREFIX}:{{default}}:stream") == 1
