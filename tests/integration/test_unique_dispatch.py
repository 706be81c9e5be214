"""Dispatching unique tasks: round trips, dispatch_many, dispatch_on_commit, the
all-or-nothing script, and the delayed-set destination the delayed path will use."""

from __future__ import annotations

import logging
from collections import Counter

import pytest
from django.db import transaction
from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

from django_taskrunner import (
    TaskAlreadyDispatched,
    TaskIdConflict,
    TaskMessage,
    UniqueForRequired,
    dispatch,
    dispatch_many,
    dispatch_on_commit,
    payload_key,
)
from django_taskrunner.core import unique as locks
from django_taskrunner.core.dispatch import prepare
from django_taskrunner.core.unique import holder_value
from django_taskrunner.store import Store, get_store, keys
from tests.testapp.tasks import noop, unique_order
from tests.worker_helpers import app_now_ms

pytestmark = pytest.mark.django_db(transaction=True)

ORDER = "tests.testapp.tasks.unique_order"


def reset_counts(r) -> None:
    """Zero the command counters (of every master, on a cluster)."""
    if isinstance(r, RedisCluster):
        r.config_resetstat(target_nodes=RedisCluster.PRIMARIES)
    else:
        r.config_resetstat()


def command_counts(r) -> dict[str, int]:
    """The data commands the server ran since the last reset (scripts' own commands
    included); on a cluster, what its masters ran, added up."""
    if isinstance(r, RedisCluster):
        per_node = r.info("commandstats", target_nodes=RedisCluster.PRIMARIES).values()
    else:
        per_node = [r.info("commandstats")]
    counts: Counter[str] = Counter()
    for stats in per_node:
        for name, value in stats.items():
            counts[name.removeprefix("cmdstat_")] += int(value["calls"])
    return {name: n for name, n in counts.items() if name in DATA_COMMANDS and n}


# What a dispatch may send or run in a script: only these are counted. Whatever else
# falls inside the measured window is none of the dispatch's doing and varies from run to
# run: connection set-up (HELLO, CLIENT SETINFO, PING), a cluster client learning the
# layout (CLUSTER SLOTS), a replica's REPLCONF ACK on its master, our own INFO.
DATA_COMMANDS = frozenset({"xadd", "evalsha", "eval", "script|load", "get", "set", "del",
                           "hget", "hset", "pexpire", "expire", "publish", "zadd", "zrem",
                           "zrange", "zrangebyscore", "exists", "pttl", "incr"})


def test_a_plain_dispatch_is_one_xadd_and_a_unique_one_is_one_evalsha(r):
    dispatch(noop, {"n": 0})  # connect first
    dispatch(ORDER, {"order": "warm-up"})  # and load the script

    reset_counts(r)
    dispatch(noop, {"n": 1})
    # One XADD: its task id is its entry's, and its record is the worker's to write. On a
    # cluster (where no script can read a record and an entry together) the XADD, then
    # one EVALSHA (record_new.lua) writing the record with the stream id.
    assert command_counts(r) in ({"xadd": 1}, {"xadd": 1, "evalsha": 1, "hset": 1,
                                                "expire": 1})
    assert (command_counts(r) == {"xadd": 1}) == (not get_store().records.clustered)

    reset_counts(r)
    dispatch(ORDER, {"order": "rt-1"})
    # One EVALSHA; inside it one GET of the lock, the XADD and two SETs (the lock and its
    # mode record, for the admin), and on one server the task's record (DEL of an older
    # one of a reused task_id, HSET, EXPIRE). On a cluster the record follows in a second
    # round trip once the add succeeded (record_new.lua: HSET, EXPIRE; it deletes only
    # the record of an earlier dispatch of the id).
    unique = {"get": 1, "xadd": 1, "set": 2, "hset": 1, "expire": 1}
    assert command_counts(r) == ({"evalsha": 2, **unique} if get_store().records.clustered
                                 else {"evalsha": 1, "del": 1, **unique})

    reset_counts(r)
    with pytest.raises(TaskAlreadyDispatched):
        dispatch(ORDER, {"order": "rt-1"})
    assert command_counts(r) == {"evalsha": 1, "get": 1}


def test_dispatch_many_of_a_unique_task_skips_duplicates_in_one_round_trip(r, caplog):
    held = unique_order.dispatch({"order": "m-3"})
    caplog.set_level(logging.INFO, logger="django_taskrunner")

    queued = dispatch_many(ORDER, [{"order": "m-1"}, {"order": "m-2"}, {"order": "m-1"},
                                   {"order": "m-3"}])

    assert [message.payload["order"] for message in queued] == ["m-1", "m-2"]
    assert all(message.stream_id for message in queued)
    assert get_store().streams.length("default") == 3
    for message in queued:
        assert r.get(message.lock_key).decode() == holder_value(message)
    skipped = [rec.getMessage() for rec in caplog.records if "skipped a duplicate" in rec.message]
    assert len(skipped) == 2
    assert any(held.id in line for line in skipped)


def test_dispatch_many_with_a_unique_override_locks_each_payload(r):
    queued = dispatch_many(noop, [{"n": 1}, {"n": 2}, {"n": 1}],
                           unique_key=payload_key, unique_for=10)

    assert [message.payload for message in queued] == [{"n": 1}, {"n": 2}]
    assert 9_000 < r.pttl(queued[0].lock_key) <= 10_000


def test_dispatch_on_commit_checks_now_and_skips_a_duplicate_found_at_commit(r, caplog):
    with pytest.raises(UniqueForRequired):
        dispatch_on_commit(noop, {}, unique_mode="until_executed")

    first = unique_order.dispatch({"order": "c-1"})
    caplog.set_level(logging.INFO, logger="django_taskrunner")
    with transaction.atomic():
        dispatch_on_commit(ORDER, {"order": "c-1"})  # a duplicate: skipped at commit
        dispatch_on_commit(ORDER, {"order": "c-2"})  # still dispatched after it
        assert get_store().streams.length("default") == 1

    assert get_store().streams.length("default") == 2
    assert any(first.id in rec.getMessage() for rec in caplog.records)


# -- all or nothing -------------------------------------------------------------------------


def test_a_failing_add_leaves_no_lock_and_no_task_id(r, prefix):
    # Given the stream key holding a string, so the XADD inside the script fails
    stream = get_store().streams.stream("default")
    r.set(stream, "not a stream")

    with pytest.raises(ResponseError, match="WRONGTYPE"):
        dispatch(ORDER, {"order": "crash-1"}, task_id="crash-id")

    # Then the script wrote nothing: no lock without its message
    lock_key = keys.unique_key(prefix, "default", ORDER, "crash-1")
    assert r.exists(lock_key, keys.task_id_key(prefix, "default", "crash-id")) == 0
    # And once the stream is sound the same dispatch goes through
    r.delete(stream)
    message = dispatch(ORDER, {"order": "crash-1"}, task_id="crash-id")
    assert r.get(lock_key).decode() == holder_value(message)


def test_an_unreadable_lock_adds_no_message(r, prefix):
    r.hset(keys.unique_key(prefix, "default", ORDER, "crash-2"), "x", "1")

    with pytest.raises(ResponseError, match="WRONGTYPE"):
        dispatch(ORDER, {"order": "crash-2"})

    assert get_store().streams.length("default") == 0


# -- the delayed-set destination (for dispatch_delayed / schedule_for) ---------------------


def test_enqueue_into_the_delayed_set_takes_the_lock_at_dispatch_time(r, prefix):
    due_ms = app_now_ms() + 3_600_000
    message, claim = prepare(unique_order, {"order": "later"}, task_id="later-1",
                             start_ms=due_ms)
    delayed = keys.delayed_key(prefix, message.queue)

    result = locks.enqueue(Store(r, ""), claim, delayed, message.to_json(), due_ms=due_ms)

    assert result == "delayed"
    [(body, score)] = r.zrange(delayed, 0, -1, withscores=True)
    assert int(score) == due_ms
    assert TaskMessage.from_json(body).lock_key == message.lock_key
    assert 59_000 < r.pttl(message.lock_key) <= 60_000  # counts from dispatch, not due time
    id_ttl = r.pttl(keys.task_id_key(prefix, "default", "later-1"))
    assert locks.TASK_ID_TTL_MS + 3_500_000 < id_ttl <= locks.TASK_ID_TTL_MS + 3_600_000
    with pytest.raises(TaskAlreadyDispatched):
        dispatch(ORDER, {"order": "later"})
    with pytest.raises(TaskIdConflict):
        dispatch(noop, {}, task_id="later-1")
