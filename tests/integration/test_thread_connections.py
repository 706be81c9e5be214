"""A dispatch's one command goes out on a connection of the calling thread's own
(`store/connection.py`, `ThreadConnections`), outside redis-py's pool: each thread keeps
one, a connection the server closed is replaced before the command is sent (never after:
nothing is sent twice), an error reply keeps it, a connection error closes it, a forked
child opens its own, and a thread's connection closes when the thread ends."""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.exceptions import ResponseError

from django_taskrunner import TaskMessage, dispatch
from django_taskrunner.store import get_store, keys, scripts
from django_taskrunner.store.connection import text
from django_taskrunner.store.entries import entry_body
from tests.conftest import start_private_redis
from tests.internals import stream_messages
from tests.testapp.tasks import noop
from tests.worker_helpers import wait_for


def own_connections() -> Any:
    return get_store().streams.own_connections


def client_id(own: Any) -> int:
    return int(own.execute_command("CLIENT", "ID"))


def in_thread(fn: Any) -> Any:
    found: list[Any] = []
    thread = threading.Thread(target=lambda: found.append(fn()))
    thread.start()
    thread.join(30)
    return found[0]


def test_each_thread_keeps_one_connection_of_its_own_outside_the_pool() -> None:
    own = own_connections()
    pool = get_store().client.connection_pool

    first, again = client_id(own), client_id(own)
    other = in_thread(lambda: client_id(own))

    assert first == again  # the same connection, command after command
    assert other != first  # another thread, another connection
    assert own is get_store().records.own_connections  # one per client
    assert not pool._in_use_connections  # the pool lent nothing out


def test_dispatch_sends_on_the_threads_connection_and_queues_once(prefix: str) -> None:
    own = own_connections()
    before = client_id(own)

    message = dispatch(noop, {"n": 1})

    assert prefix == get_store().prefix
    assert [queued.id for queued in stream_messages("default")] == [message.id]
    assert client_id(own) == before


def test_an_error_reply_is_raised_and_keeps_the_connection(prefix: str) -> None:
    own = own_connections()
    key = f"{prefix}:a-hash"
    own.execute_command("HSET", key, "f", "v")
    before = client_id(own)

    with pytest.raises(ResponseError, match="WRONGTYPE"):
        own.execute_command("INCR", key)

    assert client_id(own) == before


def test_a_connection_the_server_closed_is_replaced_before_sending(prefix: str) -> None:
    own = own_connections()
    key = f"{prefix}:counter"
    killed = client_id(own)
    get_store().client.execute_command("CLIENT", "KILL", "ID", killed)

    # The next command finds the connection closed, opens another and sends once.
    assert own.execute_command("INCR", key) == 1
    assert client_id(own) != killed
    assert own.execute_command("INCR", key) == 2


@pytest.fixture
def restartable(taskrunner_settings: Any) -> Iterator[dict[str, Any]]:
    """A private server the test may stop and start again on the same port."""
    workdir = tempfile.mkdtemp(prefix="trtest-thread-conn-")
    proc, url = start_private_redis(workdir)
    taskrunner_settings(REDIS_URL=url, SOCKET_TIMEOUT=2, CONNECT_TIMEOUT=2)
    state = {"proc": proc, "url": url, "workdir": workdir}
    yield state
    state["proc"].terminate()
    state["proc"].wait(10)
    shutil.rmtree(workdir, ignore_errors=True)


def test_dispatch_after_a_redis_restart_succeeds_on_a_new_connection(
    restartable: dict[str, Any], prefix: str,
) -> None:
    # Given a dispatch that left this thread's connection open
    dispatch(noop, {"n": 0})
    # When the server restarts (empty) on the same port
    restartable["proc"].terminate()
    restartable["proc"].wait(10)
    port = int(restartable["url"].rsplit(":", 1)[1].split("/")[0])
    restartable["proc"], _url = start_private_redis(restartable["workdir"], port=port)

    # Then the next dispatch goes through (a stale connection is not an outage) and
    # queues its message once
    message = dispatch(noop, {"n": 1})
    probe = redis.Redis.from_url(restartable["url"])
    try:
        entries = probe.xrange(keys.stream_key(prefix, "default"))
    finally:
        probe.close()
    assert [TaskMessage.from_json(entry_body("default", text(sid), fields)).id
            for sid, fields in entries] == [message.id]


def test_a_connection_error_closes_the_connection_and_the_next_command_reconnects(
    restartable: dict[str, Any],
) -> None:
    own = own_connections()
    client_id(own)
    restartable["proc"].terminate()
    restartable["proc"].wait(10)

    with pytest.raises(redis.ConnectionError):
        own.execute_command("PING")

    port = int(restartable["url"].rsplit(":", 1)[1].split("/")[0])
    restartable["proc"], _url = start_private_redis(restartable["workdir"], port=port)
    assert own.execute_command("PING") == b"PONG"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_opens_its_own_connection() -> None:
    own = own_connections()
    parent = client_id(own)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its connection's id, or -1 on any error
        try:
            os.write(write_end, str(client_id(own)).encode())
        except BaseException:
            os.write(write_end, b"-1")
        finally:
            os._exit(0)
    os.close(write_end)
    child = int(os.read(read_end, 64) or b"-1")
    os.close(read_end)
    os.waitpid(pid, 0)

    assert child not in (-1, parent)
    assert client_id(own) == parent  # the parent's connection was left alone


def test_a_threads_connection_closes_when_the_thread_ends() -> None:
    own = own_connections()
    ended = in_thread(lambda: client_id(own))
    gc.collect()

    def open_ids() -> set[int]:
        return {int(entry["id"]) for entry in get_store().client.client_list()}

    wait_for(lambda: ended not in open_ids())


def test_renamed_connections_reach_the_threads_connection_too() -> None:
    from django_taskrunner.store.connection import name_connections

    own = own_connections()
    client_id(own)  # a connection made before the name

    assert name_connections(get_store().client, "taskrunner:thread-conn-test")

    assert own.execute_command("CLIENT", "GETNAME") == b"taskrunner:thread-conn-test"


def test_many_commands_go_in_one_round_trip_each_error_kept_as_its_reply(prefix: str) -> None:
    own = own_connections()
    key = f"{prefix}:a-hash"
    before = client_id(own)

    replies = own.execute_many([("HSET", key, "f", "v"), ("INCR", key), ("HGET", key, "f")])

    assert replies[0] == 1 and replies[2] == b"v"
    assert isinstance(replies[1], ResponseError) and "WRONGTYPE" in str(replies[1])
    assert client_id(own) == before  # an error reply keeps the connection


def test_a_client_whose_connections_need_their_pool_sends_through_the_pool(
    redis_url: str, prefix: str,
) -> None:
    from django_taskrunner.store.connection import PooledCommands, thread_connections

    class PoolBound(redis.Connection):
        """Stands for a sentinel's connection, which is made with its pool."""

    pool = redis.ConnectionPool.from_url(redis_url, connection_class=PoolBound)
    client = redis.Redis(connection_pool=pool)
    key = f"{prefix}:pooled"
    try:
        commands = thread_connections(client)
        assert isinstance(commands, PooledCommands)

        replies = commands.execute_many([("SET", key, "1"), ("HGET", key, "f")])
        assert commands.execute_command("INCR", key) == 2
    finally:
        client.close()
    assert replies[0] is True  # through redis-py's response callbacks
    assert isinstance(replies[1], ResponseError)


class PoolBoundConnection(redis.Connection):
    """A connection class `ThreadConnections` does not make: its client keeps its pool."""


@pytest.mark.parametrize("protocol", [2, 3])
@pytest.mark.parametrize("connections", ["own", "pooled"])
def test_a_fetch_reads_the_same_entries_and_cancelled_ids_either_way(
    redis_url: str, prefix: str, protocol: int, connections: str,
) -> None:
    # Given a store on a client of that protocol, whose fetches go on the thread's own
    # connection (raw replies) or through its pool (redis-py's parsed replies)
    kind = redis.Connection if connections == "own" else PoolBoundConnection
    client = redis.Redis(connection_pool=redis.ConnectionPool.from_url(
        redis_url, connection_class=kind, protocol=protocol))
    store = get_store().on_client(client)
    broker = store.streams
    try:
        broker.ensure_group("default")
        first = broker.add("default", '{"body": 1}')
        second = broker.add("default", '{"body": 2}')
        client.sadd(keys.cancelled_key(prefix, "default"), "some-id")

        # When a worker's fetch reads them
        entries, cancelled = broker.read_checked("default", "w1", 10, 100)
        nothing, _ = broker.read_checked("default", "w1", 10, 100)  # blocks 0.1 s: none
    finally:
        client.close()

    # Then it gets each entry's id and body, and the shard's cancelled ids
    assert entries == [(first, b'{"body": 1}'), (second, b'{"body": 2}')]
    assert cancelled == {"some-id"}
    assert nothing == []


def test_the_worker_batches_load_their_scripts_after_the_server_lost_them() -> None:
    # Given an entry a worker holds, and a server that forgot every script (a restart)
    from django_taskrunner.store.streams import Requeue

    broker = get_store().streams
    broker.ensure_group("default")
    stream_id = broker.add("default", '{"body": 1}')
    entries, _ = broker.read_checked("default", "w1", 10, None)
    assert [sid for sid, _body in entries] == [stream_id]
    get_store().client.script_flush()

    # When its heartbeat holds the entry, and its acker puts it back, both as one batch
    lost = broker.hold_many("w1", {"default": [stream_id]})
    get_store().client.script_flush()
    settled = broker.settle("w1", {}, [Requeue("default", stream_id, '{"body": 2}')])

    # Then each batch loaded what it runs and did its work
    assert lost == {"default": []}
    assert settled.unsettled == []
    new_id = settled.requeued[0]
    assert new_id and new_id != stream_id
    stream = keys.stream_key(get_store().prefix, "default")
    assert get_store().client.xrange(stream) == [(new_id, {b"m": b'{"body": 2}'})]


def script_loads(client: Any) -> int:
    """SCRIPT LOAD calls the server counted (Redis 7+ counts the subcommand apart)."""
    stats = client.info("commandstats")
    found = stats.get("cmdstat_script|load") or stats.get("cmdstat_script") or {}
    return int(found.get("calls", 0))


def test_a_batch_after_a_restart_that_kept_some_scripts_is_applied_whole(prefix: str) -> None:
    # Given a plain dispatch's entry a worker holds (its task id names the entry: no
    # record yet)
    from django_taskrunner.store.records import RecordWrite
    from django_taskrunner.store.streams import Requeue

    store = get_store()
    broker = store.streams
    broker.ensure_group("default")
    message = dispatch(noop, {"n": 1})
    [(stream_id, body)] = broker.read_checked("default", "w1", 10, None)[0]
    # and a server that restarted, its script cache rebuilt in part since: another
    # worker's batch loaded `requeue.lua`, none loaded `record_new.lua`
    store.client.script_flush()
    store.client.script_load(scripts.source("requeue"))
    store.client.execute_command("CLIENT", "KILL", "ID", client_id(own_connections()))

    # When its acker puts the message back with the record it never had
    record = RecordWrite(message.id, (("s", "queued"), ("t", "tests.testapp.tasks.noop"),
                                      ("q", "default")), 3600)
    settled = broker.settle("w1", {}, [Requeue("default", stream_id, body, 0, record)])

    # Then the move and its record went in one send (a move sent ahead of its record,
    # then the record on the resend after NOSCRIPT, left the task unknown in between
    # and answers the resent move "not ours": no new stream id)
    assert settled.unsettled == []
    new_id = settled.requeued[0]
    assert new_id and text(new_id) != stream_id
    stored = store.client.hgetall(keys.record_key(store.prefix, message.id))
    assert stored[b"s"] == b"queued"


def test_a_connection_loads_a_batchs_scripts_once_and_again_after_it_reconnects(
    prefix: str,
) -> None:
    store = get_store()
    broker = store.streams
    broker.ensure_group("default")
    held = {"default": [broker.add("default", '{"body": 1}')]}
    broker.read_checked("default", "w1", 10, None)
    store.client.script_flush()
    before = script_loads(store.client)

    broker.hold_many("w1", held)  # loads hold.lua ahead of the batch, in its round trip
    loaded = script_loads(store.client)
    broker.hold_many("w1", held)
    again = script_loads(store.client)
    store.client.execute_command("CLIENT", "KILL", "ID", client_id(own_connections()))
    assert broker.hold_many("w1", held) == {"default": []}
    after_reconnect = script_loads(store.client)

    assert loaded - before >= 1
    assert again == loaded  # the same connection: nothing loaded again
    assert after_reconnect - again == loaded - before  # a new connection loads its own
