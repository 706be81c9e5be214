"""A worker's own connections, named after it, so that its stop can wake its blocked reads.

Each fetcher blocks in `XREADGROUP ... BLOCK BLOCK_MS`; a stopping worker used to wait
for every such read to come back, up to `BLOCK_MS` (and a larger `BLOCK_MS` is what
lowers the idle cost). Instead, a worker names its client's connections after its
consumer (redis-py sends `CLIENT SETNAME` as each one connects), and at stop
`unblock_reads` finds those blocked (`CLIENT LIST`, flag `b`) and wakes them
(`CLIENT UNBLOCK`: the read returns as if it timed out, or with what it was served). On
Redis Cluster the same is done on each node: a read blocks on the node of its stream.

Where the server refuses `CLIENT SETNAME` (some proxies do), or is down when the worker
starts, the connections stay unnamed and a stop waits out the reads as before.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from redis.exceptions import ResponseError

from django_taskrunner.store.connection import server_clients
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
    that none stays unnamed; call it before the worker's threads use the client. False
    (and nothing changed) when the server refuses `CLIENT SETNAME`, or cannot be reached
    (a worker starts during an outage all the same)."""
    servers = server_clients(client)
    try:
        for server in servers:  # each server takes the name: every connection may ask
            server.client_setname(name)
    except ResponseError as exc:
        logger.info("connections stay unnamed (CLIENT SETNAME: %s): a stop waits for the "
                    "blocked reads to return", exc)
        return False
    except REDIS_DOWN:
        return False
    if hasattr(client, "nodes_manager"):  # a cluster's nodes found later (a failover)
        client.nodes_manager.connection_kwargs["client_name"] = name
    for server in servers:
        pool = server.connection_pool
        pool.connection_kwargs["client_name"] = name
        # A connection keeps the name it was made with: drop those made so far (closing
        # the idle ones), so that every connection from now on is a new, named one.
        pool.disconnect(inuse_connections=False)
        pool.reset()
    return True


def unblock_reads(client: Any, name: str) -> int | None:
    """Wake the blocked commands of the connections named `name` (`CLIENT UNBLOCK`, which
    answers them as if they timed out), on every server of `client`; how many were
    woken. None when they could not be looked for (the connections are not named, the
    server refuses, or it cannot be reached): the reads then end on their own, and
    asking again would only wait for the server."""
    servers = server_clients(client)
    if not servers or any(server.connection_pool.connection_kwargs.get("client_name") != name
                          for server in servers):
        return None
    woken = 0
    try:
        for server in servers:
            blocked = [entry["id"] for entry in server.client_list(_type="normal")
                       if text(entry.get("name", "")) == name
                       and "b" in text(entry.get("flags", ""))]
            woken += sum(int(server.client_unblock(int(client_id))) for client_id in blocked)
    except (ResponseError, *REDIS_DOWN) as exc:
        logger.debug("could not wake the blocked reads (%s): they end on their own", exc)
        return None
    return woken
