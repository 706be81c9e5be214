"""What only a Redis Cluster can show: the client is chosen from the settings, a split
queue's shards live on different masters, wake-ups published on one master reach a
scheduler subscribed on another, SCAN sees every master, and scripts survive a node
that has never seen them."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError
from redis.cluster import RedisCluster

from django_taskrunner import (
    RedisUnavailable,
    dispatch,
    dispatch_delayed,
    dispatch_many,
    get_redis,
)
from django_taskrunner.store import get_store, keys
from tests.conftest import delete_prefix
from tests.integration.scheduling_helpers import leads, running_worker, wait_for
from tests.testapp.tasks import noop, runs_key, stamp, stamps_key, unique_order
from tests.worker_helpers import app_now_ms

pytestmark = pytest.mark.django_db(transaction=True)

LATE_BOUND_MS = 2000  # as tests/integration/test_delayed.py; the resync is every 5 s


def master_of(r: RedisCluster, key: str) -> str:
    return r.get_node_from_key(key).name


def test_cluster_nodes_select_redis_clusters_client(r):
    assert isinstance(get_redis(), RedisCluster)
    message = dispatch(noop, {"n": 1})
    assert r.xlen(get_store().streams.stream("default")) == 1
    assert message.stream_id


def test_a_workers_room_for_connections_reaches_every_master(r):
    # each node has a pool of its own; a node found later (a failover) gets the cap too
    from django_taskrunner.store.connection import make_room

    client = get_redis()
    dispatch(noop, {"n": 1})  # the nodes' pools exist now
    make_room(client, 500)
    pools = [node.redis_connection.connection_pool for node in client.get_nodes()
             if node.redis_connection is not None]
    assert pools and all(pool.max_connections >= 500 for pool in pools)
    assert client.nodes_manager.connection_kwargs["max_connections"] == 500


def test_a_redis_url_naming_one_node_finds_the_whole_cluster(r, redis_cluster,
                                                              taskrunner_settings, run_burst):
    # Given only the URL of one replica (the last node), no CLUSTER_NODES
    taskrunner_settings(REDIS_URL=f"redis://{redis_cluster.nodes[-1]}/0")
    assert isinstance(get_redis(), RedisCluster)

    # When tasks go to queues whose slots are on every master, and a worker drains them
    queues = ["default", "other", "q-a", "q-b", "q-c", "q-d"]
    for n, queue in enumerate(queues):
        dispatch(noop, {"n": n}, queue=queue)
    masters = {master_of(r, keys.stream_key(get_store().prefix, queue)) for queue in queues}
    run_burst(*[arg for queue in queues for arg in ("--queue", queue)])

    # Then each ran once, whichever master held it
    assert len(masters) == 3
    counts = r.hgetall(runs_key())
    assert len(counts) == len(queues) and set(counts.values()) == {b"1"}


def test_an_unreachable_cluster_fails_dispatch_and_runtasks_clearly(taskrunner_settings):
    taskrunner_settings(CLUSTER_NODES=["127.0.0.1:1"], CONNECT_TIMEOUT=0.2)
    with pytest.raises(RedisUnavailable, match="Redis is unreachable"):
        dispatch(noop, {"n": 1})
    with pytest.raises(CommandError, match="cannot connect to Redis"):
        call_command("runtasks", "--burst")


def test_the_shards_of_a_split_queue_live_on_different_masters(r, taskrunner_settings):
    taskrunner_settings(SHARDS={"hot": 4})
    for n in range(8):
        dispatch(noop, {"n": n}, queue="hot")
    streams = [keys.stream_key(get_store().prefix, f"hot#{i}") for i in range(4)]

    assert [r.xlen(stream) for stream in streams] == [2, 2, 2, 2]
    assert len({r.keyslot(stream) for stream in streams}) == 4
    assert len({master_of(r, stream) for stream in streams}) == 3


def test_a_unique_lock_shares_the_slot_of_its_message(r, taskrunner_settings):
    taskrunner_settings(SHARDS={"hot": 4})
    prefix = get_store().prefix
    for n in range(20):
        message = dispatch(unique_order, {"order": f"k{n}"}, queue="hot")
        shard = message.lock_key.split("{", 1)[1].split("}", 1)[0]
        assert message.lock_key == keys.unique_key(prefix, shard,
                                                   "tests.testapp.tasks.unique_order", f"k{n}")
        assert r.keyslot(message.lock_key) == r.keyslot(keys.stream_key(prefix, shard))


def test_wake_ups_published_on_every_master_reach_the_scheduler(r, taskrunner_settings):
    # Given a leading scheduler, subscribed on one node, sleeping until a task a minute away
    taskrunner_settings(SHARDS={"hot": 4})
    with running_worker("hot") as worker:
        wait_for(lambda: leads(worker), 5)
        late_due = app_now_ms() + 60_000
        dispatch_delayed(stamp, {"n": "late"}, delay=60, queue="hot")
        wait_for(lambda: any(abs(due - late_due) < 5000  # the scheduler knows of it
                             for due in worker.scheduling.scheduler._next_due.values()), 5)

        # When one task due in 0.3 s goes to each shard (their sets are on 3 masters)
        due = app_now_ms() + 300
        for n in range(4):
            dispatch_delayed(stamp, {"n": n}, delay=0.3, queue="hot")

        # Then every one runs on time: each master's PUBLISH woke the scheduler
        wait_for(lambda: all(r.llen(f"{stamps_key()}:{n}") for n in range(4)), 5)
    for n in range(4):
        (started,) = [int(v) for v in r.lrange(f"{stamps_key()}:{n}", 0, -1)]
        assert due <= started < due + LATE_BOUND_MS, (n, started - due)


def test_scan_sees_the_keys_of_every_master(r, prefix):
    keys = [f"{prefix}:{{q{n}}}:probe" for n in range(30)]
    for key in keys:
        r.set(key, 1)
    assert len({master_of(r, key) for key in keys}) == 3

    assert sorted(k.decode() for k in r.scan_iter(match=f"{prefix}:*", count=5)) == sorted(keys)
    delete_prefix(r, prefix)
    assert list(r.scan_iter(match=f"{prefix}:*")) == []


def test_scripts_run_on_masters_that_never_saw_them(r, taskrunner_settings):
    # A replica promoted by a failover has an empty script cache: emulate that by
    # flushing every master's cache, then dispatch through scripts and a cluster pipeline.
    taskrunner_settings(SHARDS={"hot": 4})
    dispatch(unique_order, {"order": "warm"}, queue="hot")
    r.script_flush()  # on every master

    for n in range(8):
        dispatch(unique_order, {"order": f"s{n}"}, queue="hot")
    # a unique dispatch_many: one EVAL per message, in a cluster pipeline
    queued = dispatch_many(unique_order,
                           [{"order": f"s{n}"} for n in range(4, 12)], queue="hot")

    assert [m.payload["order"] for m in queued] == [f"s{n}" for n in range(8, 12)]
    lengths = [r.xlen(keys.stream_key(get_store().prefix, f"hot#{i}")) for i in range(4)]
    assert sum(lengths) == 1 + 8 + 4


def test_a_redis_url_of_a_cluster_node_with_a_database_number_is_refused(redis_cluster,
                                                                         taskrunner_settings):
    taskrunner_settings(REDIS_URL=f"redis://{redis_cluster.nodes[0]}/3")
    with pytest.raises(ImproperlyConfigured, match="database 0 only"):
        get_redis()
