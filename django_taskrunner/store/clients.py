"""A worker's own connections, named after it, so that its stop can wake its blocked reads.

Each fetcher blocks in `XREADGROUP ... BLOCK BLOCK_MS`; a stopping worker used to wait
for every such read to come back, up to `BLOCK_MS` (and a larger `BLOCK_MS` is what
lowers the idle cost). Instead, a worker names its client's connections after its
consumer (redis-py sends `CLIENT SETNAME` as each one connects), and at stop
`unblock_reads` finds those blocked (`CLIENT LIST`, flag `b`) and wakes them
(`CLIENT UNBLOCK`: the read returns as if it timed out, or with what it was served).

Where the server refuses `CLIENT SETNAME` (some proxies do), or is down when the worker
starts, the connections stay unnamed and a stop waits out the reads as before; so it does
on Redis Cluster, whose client is left as it is.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

from django_taskrunner.store.errors import REDIS_DOWN
from django_taskrunner.store.values import text

logger = logging.getLogger(__name__)

# What a connection name may hold (CLIENT SETNAME refuses spaces and newlines).
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_.:@#-]")


def connection_name(consumer: str) -> str:
    """The name of a worker's connections: `taskrunner:<consumer>`, seen in CLIENT LIST."""
    return "taskrunner:" + _NOT_IN_NAME.sub("_", consumer)


def name_connections(client: Any, name: str) -> bool:
    """Name every connection `client` makes from now on, and drop those it made so far so
    that none stays unnamed; call it before the worker's threads use the client. False (and
    nothing changed) on a cluster, when the server refuses `CLIENT SETNAME`, or when it
    cannot be reached (a worker starts during an outage all the same)."""
    pool = getattr(client, "connection_pool", None)
    if isinstance(client, RedisCluster) or pool is None:
        return False
    try:
        client.client_setname(name)  # the server takes it: every connection may ask
    except ResponseError as exc:
        logger.info("connections stay unnamed (CLIENT SETNAME: %s): a stop waits for the "
                    "blocked reads to return", exc)
        return False
    except REDIS_DOWN:
        return False
    pool.connection_kwargs["client_name"] = name
    # A connection keeps the name it was made with: drop those made so far (closing the
    # idle ones), so that every connection from now on is a new, named one.
    pool.disconnect(inuse_connections=False)
    pool.reset()
    return True


def unblock_reads(client: Any, name: str) -> int:
    """Wake the blocked commands of the connections named `name` (`CLIENT UNBLOCK`, which
    answers them as if they timed out); how many were woken. 0 on a cluster, or when
    the server refuses or cannot be reached: the reads then end on their own."""
    if isinstance(client, RedisCluster):
        return 0
    try:
        blocked = [entry["id"] for entry in client.client_list(_type="normal")
                   if text(entry.get("name", "")) == name and "b" in text(entry.get("flags", ""))]
        return sum(int(client.client_unblock(int(client_id))) for client_id in blocked)
    except (ResponseError, *REDIS_DOWN) as exc:
        logger.debug("could not wake the blocked reads (%s): they end on their own", exc)
        return 0
