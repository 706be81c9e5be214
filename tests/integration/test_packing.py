"""The store's clients pack commands with hiredis in one call (`store/connection.py`,
`HiredisPacker`): the same bytes on the wire as redis-py's own packing, the same
`DataError` for what redis-py refuses, and a client that encodes text otherwise keeps
redis-py's packing."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from redis.connection import Connection
from redis.exceptions import DataError

from django_taskrunner.store.connection import HiredisPacker, get_redis, pack_with_hiredis

hiredis = pytest.importorskip("hiredis", reason="redis-py packs in Python without hiredis")

COMMANDS: list[tuple[Any, ...]] = [
    ("SET", "k", "text é ✓"),
    ("XADD", "s", "*", "m", '{"payload": [1, 2.5, null]}'),
    ("EVALSHA", "a" * 40, 2, "k1", "k2", -7, 1.5, 1e-05, float("inf"), 10**20),
    ("SET", b"raw", b"\x00\xff bytes"),
    ("SET", "k", bytearray(b"a bytearray")),  # hiredis refuses it: redis-py's packing
    ("SET", "k", memoryview(b"a memoryview")),
    ("CLIENT SETNAME", "two-word-command"),
    (b"CLIENT SETNAME", "two-word-command"),
    ("SET", "big", "x" * 100_000),
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda args: repr(args[:3])[:40])
def test_packs_the_bytes_redis_py_packs(args: tuple[Any, ...]) -> None:
    ours = b"".join(bytes(chunk) for chunk in HiredisPacker().pack(*args))
    theirs = b"".join(bytes(chunk) for chunk in Connection()._command_packer.pack(*args))
    assert ours == theirs


@pytest.mark.parametrize("value", [True, None, [1], {"a": 1}])
def test_what_redis_py_refuses_raises_its_data_error(value: Any) -> None:
    with pytest.raises(DataError, match="Invalid input of type"):
        HiredisPacker().pack("SET", "k", value)


def test_the_store_client_packs_with_hiredis_and_round_trips(taskrunner, prefix: str) -> None:
    # Given the store's client (built from the settings' REDIS_URL)
    client = get_redis()
    key = f"{prefix}:packing"

    # When it sends commands of every kind of argument
    client.hset(key, mapping={"text": "é ✓", "int": 42, "float": 0.1, "bytes": b"\x00\xff",
                              "bytearray": bytearray(b"ba")})
    client.client_setname("taskrunner-packing-test")

    # Then its connections use the packer and the server got every value as sent
    assert isinstance(client.connection_pool.connection_kwargs["command_packer"],
                      HiredisPacker)
    assert client.hgetall(key) == {b"text": "é ✓".encode(), b"int": b"42", b"float": b"0.1",
                                   b"bytes": b"\x00\xff", b"bytearray": b"ba"}
    assert client.client_getname() in ("taskrunner-packing-test", b"taskrunner-packing-test")
    with pytest.raises(DataError):
        client.set(key, None)
    client.delete(key)


def test_a_client_that_encodes_text_otherwise_keeps_redis_py_packing(redis_target) -> None:
    client = redis.Redis.from_url(redis_target.url, encoding="latin-1")
    try:
        pack_with_hiredis(client)
        assert "command_packer" not in client.connection_pool.connection_kwargs
        client.set("taskrunner-test:latin", "é")
        assert client.get("taskrunner-test:latin") == "é".encode("latin-1")
        client.delete("taskrunner-test:latin")
    finally:
        client.close()
