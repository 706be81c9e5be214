"""scripts/demo as a visitor runs it: Ctrl+C stops the web server, the worker and the
embedded Redis the script started; none of them is left behind."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import pytest

from django_taskrunner.exceptions import EmbeddedRedisUnavailable
from django_taskrunner.store import embedded
from tests.e2e.test_demo import _free_port
from tests.integration.test_embedded import is_running
from tests.worker_helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]
DEMO = str(ROOT / "scripts" / "demo")

pytestmark = pytest.mark.slow


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - our server
            return response.status == 200
    except OSError:
        return False


@pytest.fixture
def demo_env(tmp_path):
    try:
        embedded.server_binary()
    except EmbeddedRedisUnavailable:
        pytest.skip("no redis-server binary available")
    folder = tempfile.mkdtemp(prefix="trdm", dir="/tmp")  # short: a unix socket lives there
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("TASKRUNNER_", "DJANGO_")) and key != "REDIS_URL"}
    env.update(DEMO_PY=sys.executable, PORT=str(_free_port()), DEMO_EMBEDDED_DIR=folder,
               DEMO_DB_PATH=str(tmp_path / "demo.sqlite3"), PYTHONPATH=str(ROOT))
    yield env
    embedded.stop_server(folder)
    shutil.rmtree(folder, ignore_errors=True)


def test_ctrl_c_stops_the_embedded_redis_the_demo_started(demo_env):
    demo = subprocess.Popen([DEMO], cwd=ROOT, env=demo_env, start_new_session=True,  # noqa: S603
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: _answers(f"http://127.0.0.1:{demo_env['PORT']}/"), timeout=120,
                 step=0.5)
        found = embedded.server_status(demo_env["DEMO_EMBEDDED_DIR"])
        assert found.running and found.pid

        os.killpg(demo.pid, signal.SIGINT)  # what Ctrl+C sends: the whole process group
        output = demo.communicate(timeout=120)[0]
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait(30)

    assert "embedded Redis: stopped" in output, output[-3000:]
    wait_for(lambda: not is_running(found.pid), timeout=30)
    assert not embedded.server_status(demo_env["DEMO_EMBEDDED_DIR"]).running
    assert "embedded Redis: stopped" in output, output[-3000:]
    assert "A shell in the demo:" in output and "manage.py shell" in output


def test_an_embedded_redis_running_before_the_demo_is_left_running(demo_env):
    url = embedded.ensure_server(demo_env["DEMO_EMBEDDED_DIR"])
    pid = embedded.server_status(demo_env["DEMO_EMBEDDED_DIR"]).pid
    demo = subprocess.Popen([DEMO], cwd=ROOT, env=demo_env, start_new_session=True,  # noqa: S603
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: _answers(f"http://127.0.0.1:{demo_env['PORT']}/"), timeout=120,
                 step=0.5)
        os.killpg(demo.pid, signal.SIGINT)
        demo.communicate(timeout=120)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait(30)

    assert is_running(pid), url
