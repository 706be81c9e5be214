"""`manage.py taskrunner_worker_check`, the worker containers' healthcheck: 0 while a
worker of this host beats, 1 once none does, 2 when Redis cannot be reached."""

from __future__ import annotations

import io
import socket

import pytest
from django.core.management import call_command

from tests.worker_helpers import wait_for, worker_thread

pytestmark = pytest.mark.django_db(transaction=True)


def check(*args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("taskrunner_worker_check", *args, stdout=out, stderr=err)
    except SystemExit as exc:
        return int(exc.code), err.getvalue()
    return 0, out.getvalue()


def test_a_running_worker_of_this_host_passes_and_a_stopped_one_fails(r, prefix):
    assert check() == (1, f"no live worker on host {socket.gethostname()}\n")

    with worker_thread():
        wait_for(lambda: check()[0] == 0, timeout=30, step=0.2)
        assert check()[1].startswith(f"alive: {socket.gethostname()}-")
        assert check("--host", "another-host")[0] == 1

    wait_for(lambda: check()[0] == 1, timeout=30, step=0.2)


def test_redis_unreachable_exits_2(settings):
    with socket.socket() as held:  # bound, never listening: refused
        held.bind(("127.0.0.1", 0))
        settings.TASKRUNNER = {"REDIS_URL": f"redis://127.0.0.1:{held.getsockname()[1]}/0"}
        code, text = check()

    assert code == 2 and "cannot reach Redis" in text
