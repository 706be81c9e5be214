"""The one job every system runs: an INCR of a counter, its completion signal.

Extras ride in the payload and cost one pipelined round trip at most:
- `t` (dispatch time, epoch seconds): also push the end-to-end latency to a list;
- `i` (task number, smoke mode): also count runs per task, to prove exactly-once.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import redis

DONE = "bench:done"
LATENCIES = "bench:lat"
SEEN = "bench:seen"

_client: redis.Redis | None = None
_lock = threading.Lock()


def client() -> redis.Redis:
    """One client per process. Built under a lock: two threads racing to build it would
    leave one client to the garbage collector, which closes the socket under the other."""
    global _client
    if _client is None:
        with _lock:
            if _client is None:
                _client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    return _client


def job(payload: Any = None) -> None:
    """The benchmark task body."""
    if not payload:
        client().incr(DONE)
        return
    pipe = client().pipeline(transaction=False)
    pipe.incr(DONE)
    if "t" in payload:
        pipe.rpush(LATENCIES, time.time() - payload["t"])
    if "i" in payload:
        pipe.hincrby(SEEN, payload["i"], 1)
    pipe.execute()
