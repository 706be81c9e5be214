"""The physical limit: plain redis-py on a stream, no task runner at all."""

from __future__ import annotations

import time
from collections.abc import Callable

import redis

STREAM = "raw:stream"
GROUP = "raw"
BODY = {"m": '{"payload":{}}'}


def xadd(client: redis.Redis, n: int) -> float:
    """One XADD per round trip."""
    start = time.perf_counter()
    for _ in range(n):
        client.xadd(STREAM, BODY)
    return time.perf_counter() - start


def xadd_pipe(client: redis.Redis, n: int) -> float:
    """XADD pipelined by 100."""
    start = time.perf_counter()
    for first in range(0, n, 100):
        pipe = client.pipeline(transaction=False)
        for _ in range(min(100, n - first)):
            pipe.xadd(STREAM, BODY)
        pipe.execute()
    return time.perf_counter() - start


def read(client: redis.Redis, n: int) -> float:
    """XREADGROUP COUNT 100 + XACK of the batch, over `n` entries added beforehand."""
    client.delete(STREAM)
    client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    xadd_pipe(client, n)
    done = 0
    start = time.perf_counter()
    while done < n:
        reply = client.xreadgroup(GROUP, "raw-1", {STREAM: ">"}, count=100)
        ids = [stream_id for stream_id, _fields in reply[0][1]]
        client.xack(STREAM, GROUP, *ids)
        done += len(ids)
    return time.perf_counter() - start


MODES: dict[str, Callable[[redis.Redis, int], float]] = {
    "xadd": xadd, "xadd-pipe": xadd_pipe, "read": read,
}
