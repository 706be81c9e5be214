"""The embedded Redis: one shared, persistent, socket-only server per data folder.

These tests start real redis-server processes and need no Django settings.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import redis

from django_taskrunner.exceptions import EmbeddedRedisUnavailable
from django_taskrunner.store.embedded import ensure_server, server_binary, stop_server
from tests.worker_helpers import wait_for

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def data_dir():
    """A short folder under /tmp (pytest's tmp_path can exceed the socket limit)."""
    try:
        server_binary()
    except EmbeddedRedisUnavailable:
        pytest.skip("no redis-server binary available")
    path = tempfile.mkdtemp(prefix="trem", dir="/tmp")
    yield os.path.join(path, "redis")
    stop_server(os.path.join(path, "redis"))
    shutil.rmtree(path, ignore_errors=True)


def server_pid(url: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        return client.info("server")["process_id"]
    finally:
        client.close()


def is_running(pid: int) -> bool:
    """True unless pid is gone or a zombie (a daemon's parent, init, reaps it late)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: fall back to signal 0
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def wait_for_exit(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_running(pid):
            return
        time.sleep(0.05)
    raise AssertionError(f"redis-server {pid} did not exit")


def test_ensure_server_starts_a_socket_only_server_and_reuses_it(data_dir):
    url = ensure_server(data_dir)

    assert url == "unix://" + os.path.join(data_dir, "redis.sock")
    assert os.stat(data_dir).st_mode & 0o777 == 0o700
    client = redis.Redis.from_url(url)
    assert client.ping()
    assert client.config_get("port") == {"port": "0"}
    assert client.config_get("appendonly") == {"appendonly": "yes"}
    client.close()
    pid = server_pid(url)
    assert int(Path(data_dir, "redis.pid").read_text()) == pid

    assert ensure_server(data_dir) == url
    assert server_pid(url) == pid


def test_processes_starting_at_the_same_moment_share_one_server(data_dir):
    code = (
        "import sys, redis\n"
        "from django_taskrunner.store.embedded import ensure_server\n"
        "url = ensure_server(sys.argv[1])\n"
        "print(redis.Redis.from_url(url).info('server')['process_id'])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    procs = [
        subprocess.Popen([sys.executable, "-c", code, data_dir], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    results = [proc.communicate(timeout=30) for proc in procs]

    assert [proc.returncode for proc in procs] == [0] * 4, results
    pids = {out.strip() for out, _ in results}
    assert len(pids) == 1
    assert int(pids.pop()) == server_pid(ensure_server(data_dir))
    # Racing servers would all print the last one's pid (it steals the socket),
    # so also check that only one was ever started.
    log = Path(data_dir, "redis.log").read_text()
    assert len(re.findall(r"(Redis|Valkey) is starting", log)) == 1


def test_data_survives_a_clean_restart(data_dir):
    url = ensure_server(data_dir)
    redis.Redis.from_url(url).set("greeting", "hello")
    old_pid = server_pid(url)

    assert stop_server(data_dir) is True
    wait_for_exit(old_pid)
    assert not os.path.exists(os.path.join(data_dir, "redis.sock"))
    assert stop_server(data_dir) is False

    url = ensure_server(data_dir)
    assert server_pid(url) != old_pid
    assert redis.Redis.from_url(url).get("greeting") == b"hello"


def in_append_only_file(data_dir: str, data: bytes) -> bool:
    """Whether the server has written `data` to its append-only file(s) under data_dir."""
    return any(data in path.read_bytes() for path in Path(data_dir).rglob("*.aof*"))


def test_a_killed_server_is_replaced_and_keeps_fsynced_data(data_dir):
    url = ensure_server(data_dir)
    redis.Redis.from_url(url).set("survivor", "yes")
    # What the server wrote to its AOF outlives a SIGKILL (the kernel holds it). It
    # writes before it replies, unless a background fsync (appendfsync everysec) is
    # running: then it may postpone the write up to 2 s. So wait until the file has it.
    wait_for(lambda: in_append_only_file(data_dir, b"survivor"), 5)
    old_pid = server_pid(url)
    os.kill(old_pid, signal.SIGKILL)
    wait_for_exit(old_pid)
    assert os.path.exists(os.path.join(data_dir, "redis.sock"))  # left behind, stale

    url = ensure_server(data_dir)
    assert server_pid(url) != old_pid
    assert redis.Redis.from_url(url).get("survivor") == b"yes"


def test_a_data_dir_too_long_for_a_unix_socket_is_refused_clearly(data_dir):
    too_long = os.path.join(data_dir, "x" * 120)

    with pytest.raises(EmbeddedRedisUnavailable, match="EMBEDDED_DIR"):
        ensure_server(too_long)
    assert not os.path.exists(too_long)


def test_stop_server_without_a_server_returns_false(data_dir):
    assert stop_server(data_dir) is False


def test_a_server_that_fails_to_start_is_reported_with_its_log(data_dir, monkeypatch):
    fake = Path(tempfile.mkdtemp(prefix="trem", dir="/tmp"), "redis-server")
    fake.write_text("#!/bin/sh\necho 'FATAL CONFIG FILE ERROR' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr("django_taskrunner.store.embedded.server_binary", lambda: str(fake))

    try:
        with pytest.raises(EmbeddedRedisUnavailable, match="FATAL CONFIG FILE ERROR"):
            ensure_server(data_dir)
    finally:
        shutil.rmtree(fake.parent)
