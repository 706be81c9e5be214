"""`manage.py taskrunner_server status|start|stop` against a real embedded server."""

from __future__ import annotations

import io
import os
import shutil
import tempfile

import pytest
from django.core.management import CommandError, call_command

from django_taskrunner import conf
from django_taskrunner.exceptions import EmbeddedRedisUnavailable
from django_taskrunner.store import embedded
from tests.integration.test_embedded import is_running
from tests.worker_helpers import wait_for


@pytest.fixture
def embedded_dir(settings, prefix):
    try:
        embedded.server_binary()
    except EmbeddedRedisUnavailable:
        pytest.skip("no redis-server binary available")
    folder = tempfile.mkdtemp(prefix="trsv", dir="/tmp")
    settings.TASKRUNNER = {"PREFIX": prefix, "EMBEDDED_DIR": folder}
    yield folder
    conf.reset()
    embedded.stop_server(folder)
    shutil.rmtree(folder, ignore_errors=True)


def server(*args: str) -> str:
    out = io.StringIO()
    call_command("taskrunner_server", *args, stdout=out)
    return out.getvalue()


def test_status_says_not_running_and_exits_3_before_anything_started_it(embedded_dir):
    out = io.StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("taskrunner_server", "status", stdout=out)

    assert exited.value.code == 3
    assert "embedded Redis: not running" in out.getvalue()
    assert f"data dir: {embedded_dir}" in out.getvalue()


def test_status_shows_the_pid_socket_and_folder_of_the_running_server(embedded_dir):
    assert "started" in server("start")
    pid = embedded.server_status(embedded_dir).pid

    shown = server("status")

    assert f"running (pid {pid})" in shown
    assert f"socket:   {os.path.join(embedded_dir, 'redis.sock')}" in shown
    assert is_running(pid)
    assert "already running" in server("start")


def test_stop_ends_the_server_process_and_keeps_its_data(embedded_dir):
    server("start")
    pid = embedded.server_status(embedded_dir).pid

    assert "stopped" in server("stop")

    wait_for(lambda: not is_running(pid), timeout=30)
    assert not embedded.server_status(embedded_dir).running
    assert os.path.isdir(os.path.join(embedded_dir, "appendonlydir"))
    assert "was not running" in server("stop")


def test_a_site_with_a_redis_url_has_no_embedded_server_to_stop(settings, prefix):
    settings.TASKRUNNER = {"PREFIX": prefix, "REDIS_URL": "redis://:secret@example.invalid:6379/0"}

    shown = server("status")
    with pytest.raises(CommandError, match="nothing to stop"):
        server("stop")

    assert "not used; this site uses the Redis at redis://***@example.invalid" in shown
