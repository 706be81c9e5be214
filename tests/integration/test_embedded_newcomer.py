"""What a site on the embedded Redis is told: one start-up line naming the binary and the
data folder, and a `check --deploy` warning when it runs so in production."""
from __future__ import annotations

import io
import logging
import os
import shutil
import sys
import tempfile

import pytest
from django.core.management import call_command
from django.test import override_settings

from django_taskrunner.checks import (
    check_connection_needs_django_redis,
    check_embedded_redis_in_production,
)
from django_taskrunner.exceptions import EmbeddedRedisUnavailable
from django_taskrunner.store import embedded


@pytest.fixture
def data_dir():
    """A short folder under /tmp (pytest's tmp_path can exceed the socket limit)."""
    try:
        embedded.server_binary()
    except EmbeddedRedisUnavailable:
        pytest.skip("no redis-server binary available")
    path = tempfile.mkdtemp(prefix="trnc", dir="/tmp")
    yield os.path.join(path, "redis")
    embedded.stop_server(os.path.join(path, "redis"))
    shutil.rmtree(path, ignore_errors=True)


def test_the_first_use_logs_the_binary_and_the_data_folder_once(data_dir, caplog):
    with caplog.at_level(logging.INFO, logger="django_taskrunner.store.embedded"):
        embedded.ensure_server(data_dir)
        embedded.ensure_server(data_dir)  # the fast path: already up
    assert announced(caplog) == [
        f"Embedded Redis: {embedded.server_binary()}, data in {data_dir} (started now; "
        f"no REDIS_URL, CONNECTION or CLUSTER_NODES is set)"]


def announced(caplog) -> list[str]:
    """The embedded module's own lines: other threads of the run may log meanwhile."""
    return [r.getMessage() for r in caplog.records if r.name == embedded.__name__]


def test_a_process_that_finds_it_running_says_so(data_dir, caplog):
    embedded.ensure_server(data_dir)
    embedded._announced.discard(data_dir)  # as in another process of the site
    caplog.clear()  # the first line may be captured too, when an earlier test set INFO
    with caplog.at_level(logging.INFO, logger="django_taskrunner.store.embedded"):
        embedded.ensure_server(data_dir)
    assert announced(caplog) == [
        f"Embedded Redis: {embedded.server_binary()}, data in {data_dir} (already running; "
        f"no REDIS_URL, CONNECTION or CLUSTER_NODES is set)"]


def _deploy_output(**taskrunner):
    out = io.StringIO()
    with override_settings(DEBUG=False, TASKRUNNER=taskrunner):
        try:
            call_command("check", "--deploy", "--tag", "compatibility", stdout=out,
                         stderr=out)
        except SystemExit:
            pass
    return out.getvalue()


def test_check_deploy_warns_when_production_runs_on_the_embedded_redis():
    assert "taskrunner.W001" in _deploy_output(EMBEDDED_DIR="site-data/redis")
    assert "site-data/redis" in _deploy_output(EMBEDDED_DIR="site-data/redis")
    assert "taskrunner.W001" not in _deploy_output(REDIS_URL="redis://localhost:6379/0")


def test_the_embedded_warning_is_a_deploy_check_only_and_not_under_debug():
    with override_settings(DEBUG=True, TASKRUNNER={}):
        assert check_embedded_redis_in_production() == []
    out = io.StringIO()
    with override_settings(DEBUG=False, TASKRUNNER={}):
        call_command("check", "--tag", "compatibility", stdout=out, stderr=out)
    assert "taskrunner.W001" not in out.getvalue()


def test_connection_without_django_redis_says_what_to_install(monkeypatch):
    with override_settings(TASKRUNNER={"CONNECTION": "default"}):
        assert check_connection_needs_django_redis() == []  # installed here
        monkeypatch.setitem(sys.modules, "django_redis", None)  # as if not installed
        [error] = check_connection_needs_django_redis()
    assert error.id == "taskrunner.E007"
    assert "django-redis" in error.msg and "django-taskrunner[django-redis]" in error.hint
