"""A worker's connections carry its name, and a stop wakes their blocked reads
(`store/connection.py`); a server that refuses `CLIENT SETNAME` leaves them as they were."""

from __future__ import annotations

import secrets
import threading
from typing import Any

import redis

from django_taskrunner.store.connection import connection_name, name_connections, unblock_reads
from tests.worker_helpers import wait_for


def blocked_with(client: Any, name: str) -> list[dict[str, Any]]:
    return [entry for entry in client.client_list(_type="normal")
            if entry.get("name") == name and "b" in entry.get("flags", "")]


def test_a_consumer_name_becomes_a_connection_name_redis_accepts() -> None:
    assert connection_name("host one:42:ab\n") == "taskrunner:host_one:42:ab_"


def test_named_connections_are_found_blocked_and_woken(redis_target) -> None:
    # Given a client whose connections are named, one of them blocked in BLPOP for 30 s
    client = redis.Redis.from_url(redis_target.url, socket_timeout=60)
    watcher = redis.Redis.from_url(redis_target.url)
    name = connection_name(f"test-{secrets.token_hex(4)}")
    try:
        assert name_connections(client, name)
        replies: list[Any] = []
        blocked = threading.Thread(
            target=lambda: replies.append(client.blpop([f"test:{name}:nothing"], timeout=30)))
        blocked.start()
        wait_for(lambda: blocked_with(watcher, name))

        # When its blocked commands are woken (through the same client: another of its
        # connections asks)
        woken = unblock_reads(client, name)

        # Then the BLPOP returns at once, as if it timed out
        blocked.join(10)
        assert not blocked.is_alive()
        assert (woken, replies) == (1, [None])
        assert unblock_reads(client, name) == 0  # nothing left blocked
        assert unblock_reads(watcher, name) is None  # a client not named so: not looked for
    finally:
        client.close()
        watcher.close()


def test_a_server_that_refuses_client_setname_leaves_the_connections_unnamed(
        redis_target, r) -> None:
    # Given a user the server does not let name its connection (no CLIENT command at all:
    # Redis 6.2 cannot deny a subcommand alone)
    user, password = f"test-noname-{secrets.token_hex(4)}", secrets.token_hex(8)
    r.acl_setuser(user, enabled=True, passwords=[f"+{password}"], keys=["*"], channels=["*"],
                  commands=["+@all", "-client"])
    client = redis.Redis.from_url(redis_target.url, username=user, password=password)
    try:
        # When a worker asks to name its connections
        named = name_connections(client, "taskrunner:refused")

        # Then it is told no, and the client still works, unnamed; a stop does not look for
        # its blocked reads
        assert named is False
        assert "client_name" not in client.connection_pool.connection_kwargs
        assert client.ping()
        assert unblock_reads(client, "taskrunner:refused") is None
    finally:
        client.close()
        r.acl_deluser(user)
