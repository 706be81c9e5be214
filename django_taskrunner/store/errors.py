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

`unavailable()` turns one of them into the `RedisUnavailable` a dispatch raises, with
`maybe_queued` saying whether the write may have reached Redis (see `may_have_run`).
"""

from __future__ import annotations

import re
from typing import Any

from redis.exceptions import (
    BusyLoadingError,
    ClusterDownError,
    MaxConnectionsError,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from django_taskrunner.exceptions import RedisUnavailable

# Any error a Redis command raises (outage or not): what an admin page shows instead of
# its data. Re-exported, so nothing outside store/ imports redis-py.
REDIS_ERROR: type[Exception] = RedisError

# An error reply to a command (WRONGTYPE: a key of the wrong type, written by hand or by
# another program): on a read, what the app reports as `UnreadableData`.
REPLY_ERROR: type[Exception] = ResponseError

REDIS_DOWN: tuple[type[Exception], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    ClusterDownError,
    TryAgainError,
    SlotNotCoveredError,
)

# Replies of a server that is up but refuses writes for now: at `maxmemory` with
# `noeviction` (OOM), a replica after a failover (READONLY), loading its data (LOADING), a
# script cache flushed under us (NOSCRIPT, when loading it again did not help), a master
# that lost its link or its replicas (MASTERDOWN, NOREPLICAS), a failed RDB save that
# stops writes (MISCONF), a long script (BUSY). The command did not run: the worker
# waits and sends again, as through an outage (`refuses_writes`).
REFUSING: tuple[type[Exception], ...] = (OutOfMemoryError, ReadOnlyError, BusyLoadingError,
                                         NoScriptError)
_REFUSING_CODES = ("OOM ", "READONLY ", "LOADING ", "NOSCRIPT ", "MASTERDOWN ", "NOREPLICAS ",
                   "MISCONF ", "BUSY ", "TRYAGAIN ", "CLUSTERDOWN ")


# How redis-py words an error reply met in a pipeline, before the reply itself.
_IN_PIPELINE = " of pipeline caused error: "
# How Redis before 7 words an error a script's redis.call met, before its code ("-NOREPLICAS
# ..."); Redis 7 replies with the code as it is.
_IN_SCRIPT = re.compile(r"^Error running script \(call to f_[0-9a-f]+\): "
                        r"@user_script:\d+: (?:@user_script: \d+: )?-")


def refuses_writes(exc: BaseException) -> bool:
    """Whether `exc` is a server refusing writes for now (see `REFUSING`), not bad data;
    in a pipeline too, where redis-py puts "Command # 1 (...) of pipeline caused error: "
    before the reply and keeps no class for the codes it does not know (NOREPLICAS...),
    and met by a script on Redis before 7, which wraps the code ("Error running script
    ...: -NOREPLICAS ...")."""
    if isinstance(exc, REFUSING):
        return True
    if not isinstance(exc, ResponseError):
        return False
    reply = str(exc)
    if reply.startswith("Command # ") and _IN_PIPELINE in reply:
        reply = reply.split(_IN_PIPELINE, 1)[1]
    reply = _IN_SCRIPT.sub("", reply, count=1)
    return f"{reply} ".startswith(_REFUSING_CODES)


def stalls_writes(exc: BaseException) -> bool:
    """Whether `exc` means "try again later": Redis unreachable or refusing writes."""
    return isinstance(exc, REDIS_DOWN) or refuses_writes(exc)


# Where redis-py opens a connection (socket connect, handshake, the health-check PING):
# an error raised inside one of these came before the command was written.
_CONNECTING = frozenset({"connect", "connect_check_health", "_connect", "on_connect",
                         "on_connect_check_health", "check_health", "get_connection"})
# Errors the server sends instead of running the command, or the client raises before
# choosing a node: the command did not run.
_REFUSED_BY_CLUSTER: tuple[type[Exception], ...] = (ClusterDownError, TryAgainError,
                                                     SlotNotCoveredError)


def may_have_run(exc: BaseException, client: Any) -> bool:
    """Whether the command that raised `exc` may have run on Redis anyway.

    False only when it certainly did not: the client was never built (`client` None), or
    it makes a single attempt and the error came before the command was sent (refused or
    timed-out connect, handshake) or is the cluster refusing it. A socket timeout or a
    connection lost after sending leaves it unknown: Redis may have run the command and
    the reply was lost. A client that retries by itself (a cluster client, a django-redis
    one) hides its earlier attempts, so with one the answer is always "maybe".
    """
    if client is None:
        return False
    if _retries(client) != 0:
        return True
    if isinstance(exc, _REFUSED_BY_CLUSTER):
        return False
    return not _raised_while_connecting(exc)


def _retries(client: Any) -> int | None:
    """How often the client retries a failed command by itself; None when unknown.

    A cluster client keeps its policy in `.retry`; a plain one's connections take it
    from the pool's connection kwargs, as redis-py's `AbstractConnection` does.
    """
    retry = getattr(client, "retry", None)
    if retry is None:
        kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", None)
        if kwargs is None:
            return None
        retry = kwargs.get("retry")
        if retry is None:
            return 1 if kwargs.get("retry_on_timeout") else 0
    get_retries = getattr(retry, "get_retries", None)
    return get_retries() if callable(get_retries) else None


def _raised_while_connecting(exc: BaseException) -> bool:
    frame = exc.__traceback__
    while frame is not None:
        code = frame.tb_frame.f_code
        if code.co_name in _CONNECTING and _is_redis_py(frame.tb_frame.f_globals):
            return True
        frame = frame.tb_next
    return False


def _is_redis_py(module_globals: dict[str, Any]) -> bool:
    name = module_globals.get("__name__", "")
    return name == "redis" or name.startswith("redis.")


def outage_text(exc: BaseException) -> str:
    """What an outage error means, for its log line and `RedisUnavailable`: a full
    connection pool is this process's own limit (redis-py raises it as a connection
    error, before any command is sent), not Redis being down."""
    if isinstance(exc, MaxConnectionsError):
        return ("the Redis connection pool is full (every one of its max_connections is "
                "in use: raise ?max_connections= in REDIS_URL, or the pool's size)")
    if refuses_writes(exc):
        return "Redis refuses writes"
    return "Redis is unreachable"


def unreadable(what: str, exc: Exception) -> RedisUnavailable:
    """The `RedisUnavailable` of a read (a lookup, a wait): nothing was written, so
    nothing may have been queued either."""
    return RedisUnavailable(f"{what}: {outage_text(exc)}: {exc}; it could not be read",
                            maybe_queued=False)


def unavailable(what: str, exc: Exception, client: Any) -> RedisUnavailable:
    """The `RedisUnavailable` for `exc`, saying whether the write may have happened."""
    maybe = may_have_run(exc, client)
    outcome = ("it may have been queued: the connection failed after the command was sent"
               if maybe else "it was not queued: the command was never sent")
    return RedisUnavailable(f"{what}: {outage_text(exc)}: {exc}; {outcome}",
                            maybe_queued=maybe)
