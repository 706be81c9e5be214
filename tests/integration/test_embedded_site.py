"""With no Redis configured, the site runs on the embedded one, shared by its processes."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile

import pytest

from django_taskrunner import conf, get_redis
from django_taskrunner.store import embedded, get_store
from tests.conftest import ROOT, worker_env
from tests.testapp.tasks import noop, runs_key

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def embedded_dir(settings, prefix):
    folder = tempfile.mkdtemp(prefix="tremb", dir="/tmp")
    settings.TASKRUNNER = {"PREFIX": prefix, "EMBEDDED_DIR": folder, "BLOCK_MS": 200}
    yield folder
    conf.reset()
    embedded.stop_server(folder)
    shutil.rmtree(folder, ignore_errors=True)


def run_worker_process(prefix: str, folder: str) -> str:
    env = worker_env(prefix, "", TASKRUNNER_TEST_EMBEDDED_DIR=folder)
    code = (
        "import django; django.setup();"
        "from django.core.management import call_command;"
        "from django_taskrunner import get_redis;"
        "call_command('runtasks', '--burst', '--queue', 'default');"
        "print('pid', get_redis().info('server')['process_id'])"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.split("pid", 1)[1].strip()


def test_dispatch_starts_the_embedded_redis_and_a_worker_process_shares_it(embedded_dir, prefix):
    message = noop.dispatch({"n": 1})
    assert get_redis().connection_pool.connection_kwargs["path"].startswith(embedded_dir)
    server_pid = str(get_redis().info("server")["process_id"])

    worker_server_pid = run_worker_process(prefix, embedded_dir)

    assert worker_server_pid == server_pid
    assert get_redis().hget(runs_key(), "noop:1") == b"1", message


def test_a_dispatched_task_survives_a_restart_of_the_embedded_redis(embedded_dir, prefix):
    noop.dispatch({"n": "kept"})
    assert embedded.stop_server(embedded_dir)
    conf.reset()

    assert get_store().streams.length("default") == 1  # the server is started again on demand
    run_worker_process(prefix, embedded_dir)
    assert get_redis().hget(runs_key(), "noop:kept") == b"1"
