"""CLUSTER_NODES and SHARDS: the checks refuse bad values, and shard names are stable."""

from __future__ import annotations

import zlib

import pytest

from django_taskrunner.checks import check_taskrunner_settings
from django_taskrunner.conf import parse_node
from django_taskrunner.core import sharding
from django_taskrunner.store import keys


def errors(settings, value):
    settings.TASKRUNNER = value
    return [(error.id, error.msg) for error in check_taskrunner_settings()]


@pytest.mark.parametrize("value", [
    {"CLUSTER_NODES": ["10.0.0.1:7000", "node-b:7001", "[::1]:7002"]},
    {"SHARDS": 4},
    {"SHARDS": {"emails": 8, "default": 1}},
])
def test_good_cluster_values_pass(settings, value):
    assert errors(settings, value) == []


@pytest.mark.parametrize("value, expected_id, words", [
    ({"CLUSTER_NODES": "10.0.0.1:7000"}, "taskrunner.E005", "non-empty list"),
    ({"CLUSTER_NODES": []}, "taskrunner.E005", "non-empty list"),
    ({"CLUSTER_NODES": ["10.0.0.1"]}, "taskrunner.E005", "'10.0.0.1' is not one"),
    ({"CLUSTER_NODES": ["10.0.0.1:99999"]}, "taskrunner.E005", "is not one"),
    ({"CLUSTER_NODES": [7000]}, "taskrunner.E005", "7000 is not one"),
    ({"CLUSTER_NODES": ["a:1"], "REDIS_URL": "redis://a:1/0"}, "taskrunner.E006",
     "not both REDIS_URL and CLUSTER_NODES"),
    ({"CLUSTER_NODES": ["a:1"], "CONNECTION": "default"}, "taskrunner.E006",
     "not both CONNECTION and CLUSTER_NODES"),
    ({"SHARDS": 0}, "taskrunner.E011", "from 1 to 256"),
    ({"SHARDS": 257}, "taskrunner.E011", "from 1 to 256"),
    ({"SHARDS": True}, "taskrunner.E011", "not True"),
    ({"SHARDS": {"emails": "4"}}, "taskrunner.E011", "not '4'"),
    ({"SHARDS": {"e:mails": 4}}, "taskrunner.E011", "'e:mails', which is not a queue name"),
    ({"SHARDS": {"hot#1": 4}}, "taskrunner.E011", "not a queue name"),
])
def test_bad_cluster_values_fail_the_checks(settings, value, expected_id, words):
    found = errors(settings, value)
    assert any(error_id == expected_id and words in msg for error_id, msg in found), found


def test_a_node_is_host_and_port():
    assert parse_node("redis-1.internal:6380") == ("redis-1.internal", 6380)
    assert parse_node("[2001:db8::7]:7000") == ("2001:db8::7", 7000)
    with pytest.raises(ValueError):
        parse_node(":7000")


def test_an_unsplit_queue_keeps_its_key_names(settings):
    settings.TASKRUNNER = {"SHARDS": {"hot": 3}}
    assert sharding.shards("default") == ["default"]
    assert sharding.next_shard("default") == "default"
    assert sharding.shard_for("default", "anything") == "default"
    assert keys.stream_key("p", sharding.next_shard("default")) == "p:{default}:stream"


def test_shard_names_are_hash_tags_and_keys_map_to_the_same_shard_every_time(settings):
    settings.TASKRUNNER = {"SHARDS": {"hot": 3}}
    assert sharding.shards("hot") == ["hot#0", "hot#1", "hot#2"]
    assert keys.stream_key("p", "hot#1") == "p:{hot#1}:stream"
    assert keys.queue_of("hot#1") == "hot" and keys.queue_of("hot") == "hot"
    # CRC-32, not Python's salted hash(): the same in every process
    assert [sharding.shard_for("hot", f"k{n}") for n in range(6)] == [
        sharding.shard_for("hot", f"k{n}") for n in range(6)]
    assert sharding.shard_for("hot", "order-1") == f"hot#{zlib.crc32(b'order-1') % 3}"
    spread = sharding.spread("hot", 7)
    assert sorted(spread.count(name) for name in sharding.shards("hot")) == [2, 2, 3]
    assert len({sharding.next_shard("hot") for _ in range(3)}) == 3


def test_the_patterns_of_a_queues_locks_cover_its_shards():
    assert keys.unique_patterns("p", "hot") == ["p:{hot}:unique:*", "p:{hot#*}:unique:*"]
