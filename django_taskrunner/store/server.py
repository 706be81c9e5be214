"""Which server the client talks to, whether it can run this app, and what it offers.

The app needs Redis-compatible streams with `XPENDING ... IDLE` (Redis 6.2, every Valkey)
and Lua scripts run by `EVALSHA`. `check_server()` finds out once, at worker start-up and
in the `taskrunner.E020` system check, and says in one message what is missing, instead
of a stack trace at the first task. It reads `INFO server` for the name and version
(Valkey reports `server_name:valkey` and `valkey_version`, and an old `redis_version`
for compatibility) and then tries the two things the version cannot vouch for: a proxy
or a lookalike server may report any version and still refuse them.

Newer commands are used where the server has them: `features()` asks once per client
(`COMMAND LIST`) and remembers the answer on the client, so the broker picks, say,
`XACKDEL` (Redis 8.2) over `XACK` + `XDEL` without a round trip per call. A server
that refuses `COMMAND LIST` gets the commands every supported server has.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import ResponseError

from django_taskrunner.exceptions import TaskRunnerError
from django_taskrunner.store import keys, scripts
from django_taskrunner.store.connection import text

logger = logging.getLogger(__name__)

# XPENDING ... IDLE (the reclaimer, worker/reclaim.py) arrived in Redis 6.2.
MINIMUM_REDIS = (6, 2, 0)
MINIMUM_TEXT = "Redis 6.2 or Valkey 7.2"
_FEATURES_ATTRIBUTE = "_taskrunner_server_features"


class ServerUnsupported(TaskRunnerError):
    """The server answers but cannot run this app (too old, no streams, no EVALSHA)."""


@dataclass(frozen=True)
class ServerInfo:
    """What `INFO server` says: `name` is "redis", "valkey" or another fork's name."""

    name: str
    version: str  # the server's own version: valkey_version on Valkey
    redis_version: str  # the Redis version it claims to be compatible with

    @property
    def label(self) -> str:
        """"Valkey 9.1.2", "Redis 7.0.15": for messages and the docs' table."""
        return f"{self.name.capitalize()} {self.version}"


@dataclass(frozen=True)
class Features:
    """Optional newer commands the server has (looked up once per client)."""

    xackdel: bool = False  # XACKDEL: ack and delete stream entries in one command


def version_tuple(version: str) -> tuple[int, int, int]:
    """"7.0.15" -> (7, 0, 15); parts that are missing or not numbers count as 0."""
    parts: list[int] = []
    for part in version.split(".")[:3]:
        digits = re.match(r"\d+", part)
        parts.append(int(digits.group()) if digits else 0)
    while len(parts) < 3:
        parts.append(0)
    return parts[0], parts[1], parts[2]


def parse_info(info: dict[str, Any]) -> ServerInfo:
    """A ServerInfo from the fields of `INFO server`."""
    redis_version = str(info.get("redis_version", "0"))
    name = str(info.get("server_name") or "redis").lower()
    version = str(info.get(f"{name}_version") or redis_version)
    return ServerInfo(name=name, version=version, redis_version=redis_version)


def too_old(server: ServerInfo) -> bool:
    """Whether the server predates what the app uses (every Valkey is recent enough)."""
    return version_tuple(server.redis_version) < MINIMUM_REDIS


def read_info(client: Any) -> ServerInfo | None:
    """`INFO server` of the server (one node of a cluster), None when INFO is refused."""
    try:
        info = client.info("server")
    except ResponseError as exc:
        logger.info("INFO server refused (%s): the server's version is not checked", exc)
        return None
    if info and isinstance(next(iter(info.values())), dict):  # a cluster: one dict a node
        info = next(iter(info.values()))
    return parse_info(info)


def _probe_streams(client: Any, prefix: str) -> str | None:
    """Why the server cannot run the reclaimer's XPENDING ... IDLE, or None when it can.

    Asks about a key that does not exist: a capable server answers "NOGROUP" (or an empty
    list), and writes nothing.
    """
    probe = keys.stream_key(prefix, "server-check")
    try:
        client.execute_command("XPENDING", probe, "server-check", "IDLE", 0, "-", "+", 1)
    except ResponseError as exc:
        message = str(exc)
        if "NOGROUP" in message or "no such key" in message.lower():
            return None
        if "unknown command" in message.lower():
            return "it has no streams (XPENDING is an unknown command)"
        return f"it refuses XPENDING ... IDLE ({message})"
    return None


def _probe_scripts(client: Any) -> str | None:
    """Why the server cannot run Lua scripts by EVALSHA, or None when it can."""
    script = Script(None, scripts.source("server_check").encode("utf-8"))
    try:
        answer = script(keys=[], args=[], client=client)
    except ResponseError as exc:
        return f"it refuses Lua scripts by EVALSHA ({exc})"
    if int(answer) != 1:
        return f"its Lua scripts answer {answer!r} where 1 was expected"
    return None


def check_server(client: Any, prefix: str) -> ServerInfo | None:
    """Raise ServerUnsupported, naming the minimum, when the server cannot run the app.

    Returns what INFO said (None when the server refuses INFO, which is allowed: the
    probes still run). Connection errors are not caught: an unreachable server is the
    caller's to report.
    """
    server = read_info(client)
    if server is not None and too_old(server):
        raise ServerUnsupported(
            f"{server.label} is too old for django-taskrunner, which needs {MINIMUM_TEXT} "
            f"or newer (for XPENDING ... IDLE); upgrade the server")
    reasons = [reason for reason in (_probe_streams(client, prefix), _probe_scripts(client))
               if reason]
    if reasons:
        name = server.label if server else "The Redis server"
        raise ServerUnsupported(
            f"{name} cannot run django-taskrunner: {'; and '.join(reasons)}. It needs "
            f"{MINIMUM_TEXT} or newer, reached directly or through a proxy that passes "
            f"streams and EVALSHA")
    return server


def _has_command(client: Any, name: str) -> bool:
    """Whether the server knows command `name` (COMMAND LIST, Redis 7.0+; every newer
    command we look for is newer than that). False when the server refuses it."""
    # One string, so redis-py applies no reply parser of COMMAND's; a cluster asks one node.
    options = {"target_nodes": RedisCluster.DEFAULT_NODE} if isinstance(
        client, RedisCluster) else {}
    try:
        names = client.execute_command("COMMAND LIST", "FILTERBY", "PATTERN", name.lower(),
                                       **options)
    except ResponseError:
        return False
    return name.lower() in {text(found).lower() for found in names}


def features(client: Any) -> Features:
    """The optional commands `client`'s server has, asked once and kept on the client."""
    found = getattr(client, _FEATURES_ATTRIBUTE, None)
    if found is None:
        found = Features(xackdel=_has_command(client, "XACKDEL"))
        setattr(client, _FEATURES_ATTRIBUTE, found)
    return found


def set_features(client: Any, found: Features) -> None:
    """Decide the features of `client` instead of asking the server (tests, benchmarks)."""
    setattr(client, _FEATURES_ATTRIBUTE, found)


class RedisServer:
    """The server under one client (`Store.server`): whether it can run the app, what
    it is, and which optional commands it offers."""

    def __init__(self, client: Any, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    def check(self) -> ServerInfo | None:
        """`check_server`: raise ServerUnsupported when the server cannot run the app."""
        return check_server(self.client, self.prefix)

    def info(self) -> ServerInfo | None:
        """`INFO server` (one node of a cluster); None when INFO is refused."""
        return read_info(self.client)

    def features(self) -> Features:
        """The optional commands the server has, asked once per client."""
        return features(self.client)

