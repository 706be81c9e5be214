"""A worker started before its Redis waits for it instead of exiting."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest
import redis

from tests.conftest import ROOT, start_private_redis, worker_env
from tests.worker_helpers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_runtasks_waits_for_redis_then_runs_what_is_dispatched(prefix):
    # The port stays bound (never listening: connections are refused) while the worker
    # waits, so no other process can take it; it is freed just before Redis binds it.
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    port = held.getsockname()[1]
    url = f"redis://127.0.0.1:{port}/0"
    worker = subprocess.Popen(
        [sys.executable, "-m", "django", "runtasks", "--queue", "default"],
        cwd=ROOT, env=worker_env(prefix, url), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(
        line.decode() for line in worker.stdout), daemon=True)
    reader.start()
    workdir = tempfile.mkdtemp(prefix="trtest-late-")
    server = None
    try:
        # The worker found Redis refusing connections and said it waits...
        wait_for(lambda: any("waiting for it" in line for line in lines) or worker.poll(), 30)
        # ...and keeps waiting through its next retries: no event says "did not exit", so
        # a short fixed wait is the honest check
        time.sleep(0.5)
        assert worker.poll() is None, "".join(lines)[-2000:]
        held.close()
        server, _url = start_private_redis(workdir, port=port)
        client = redis.Redis.from_url(url)
        stream = f"{prefix}:{{default}}:stream"
        body = '{"v":1,"id":"late-1","task":"tests.testapp.tasks.noop","payload":{"n":"late"}}'
        client.xadd(stream, {"m": body})
        deadline = time.monotonic() + 20
        while client.hget(f"{prefix}:test:runs", "noop:late") != b"1":
            assert time.monotonic() < deadline, "the worker never ran the task"
            time.sleep(0.1)
    finally:
        held.close()
        worker.terminate()
        worker.wait(20)
        reader.join(20)
        output = "".join(lines)
        if server is not None:
            server.terminate()
            server.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)
    assert "waiting for it" in output
