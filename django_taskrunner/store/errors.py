"""`REDIS_DOWN`: the errors that mean Redis cannot serve a command *right now*.

Every thread that retries through an outage (fetchers, acker, scheduler, election,
monitor, lock release) catches this one tuple, so a Redis Cluster failover is ridden
out like a restart of a single server. On a cluster, redis-py retries these itself a few
times (refreshing the slot map after MOVED or a dead node); what it still raises once a
failover takes longer than its retries are the cluster errors below:

- `ClusterDownError` (and its `MasterDownError`): "CLUSTERDOWN", a slot has no master
  until a replica is promoted;
- `TryAgainError`: "TRYAGAIN", a slot is being migrated;
- `SlotNotCoveredError`: the client's slot map has no node for the slot yet.

Programming errors (a cross-slot script, a wrong type) are not in the tuple: they are
bugs, and retrying would hide them.
"""

from __future__ import annotations

from redis.exceptions import (
    ClusterDownError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

REDIS_DOWN: tuple[type[Exception], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    ClusterDownError,
    TryAgainError,
    SlotNotCoveredError,
)
