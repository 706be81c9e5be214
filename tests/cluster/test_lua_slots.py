"""The Lua scripts' cluster-safety claims (their first lines), tried on a real Redis Cluster.

A cluster node refuses a script that touches a key of another node, declared or not
("Script attempted to access a non local key"); a key of another slot on the same node
is let through for EVAL scripts (Redis keeps 6.x's rule for them), so these tests also
read back the keys a script wrote and check that all share one slot. The scripts that
build key names from ARGV and say "yes" (fair_feed.lua, promote_due.lua) run here with
the keys the store gives them; the one that says "no" (record_add.lua) is refused with
the keys it needs. tests/unit/test_lua_scripts.py checks every header against its script.
"""

from __future__ import annotations

import json

import pytest
from redis.exceptions import RedisClusterException, ResponseError

from django_taskrunner.store import get_store, keys, scripts

pytestmark = pytest.mark.django_db(transaction=True)


def _other_node_key(r, key: str, make) -> str:
    """A key `make(n)` served by another master than `key`."""
    node = r.get_node_from_key(key).name
    return next(other for other in (make(n) for n in range(64))
                if r.get_node_from_key(other).name != node)


def _slots_written(r, prefix: str) -> set[int]:
    return {r.keyslot(key) for key in r.scan_iter(match=f"{prefix}:*", count=1000)}


def test_the_cluster_refuses_a_script_touching_an_undeclared_key_of_another_node(r, prefix):
    # Guards the tests below: what they run would fail here if a key left the node.
    declared = f"{prefix}:{{q}}:x"
    undeclared = _other_node_key(r, declared, lambda n: f"{prefix}:{{q{n}}}:y")
    with pytest.raises(ResponseError):
        r.eval("redis.call('SET', ARGV[1], '1') return 1", 1, declared, undeclared)
    assert r.eval("redis.call('SET', ARGV[1], '1') return 1", 1, declared,
                  f"{prefix}:{{q}}:y") == 1


def test_fair_feed_runs_on_the_cluster_with_the_lists_it_names(r, prefix):
    store = get_store()
    bodies = [json.dumps({"id": f"t{n}", "tok": "k"}) for n in range(3)]
    store.fair.push("mail", "alice", 1, bodies)
    assert r.keyslot(keys.fair_list_key(prefix, "mail", "alice")) == r.keyslot(
        keys.stream_key(prefix, "mail"))
    assert store.fair.feed("mail", 10) == 3
    assert r.xlen(keys.stream_key(prefix, "mail")) == 3
    assert _slots_written(r, prefix) == {r.keyslot(keys.stream_key(prefix, "mail"))}


def test_promote_due_runs_on_the_cluster_and_puts_a_fair_task_in_the_list_it_names(r, prefix):
    store = get_store()
    store.fair.push("mail", "bob", 1, [json.dumps({"id": "first", "tok": "k"})])
    due = json.dumps({"id": "later", "tok": "k", "fk": "bob"})
    store.streams.add_delayed("mail", due, 1000, None)
    moved, _ = store.streams.promote_due("mail", 2000, 10)
    assert moved == 1
    assert [body.decode() for body in store.fair.waiting("mail", "bob", 0, 10)][-1] == due
    assert _slots_written(r, prefix) == {r.keyslot(keys.stream_key(prefix, "mail"))}


def test_record_add_which_says_no_is_refused_on_the_cluster(r, prefix):
    stream = keys.stream_key(prefix, "mail")
    record = _other_node_key(r, stream, lambda n: keys.record_key(prefix, f"t{n}"))
    node = r.get_node_from_key(stream)
    with pytest.raises((ResponseError, RedisClusterException)):
        r.execute_command("EVAL", scripts.source("record_add"), 2, stream, record, "m",
                          json.dumps([["60", ["s", "queued"]]]), "", "{}", target_nodes=node)
    assert r.xlen(stream) == 0
