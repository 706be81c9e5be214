"""A web process killed by SIGKILL right after its commit, before the on-commit callback
that moves its outbox row to Redis: the saved row and its task are both kept, and the
leader's flusher queues the task exactly once."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from django_taskrunner.models import OutboxMessage
from django_taskrunner.store import get_store, keys
from tests.conftest import ROOT, worker_env
from tests.testapp.models import Note
from tests.testapp.tasks import runs_key
from tests.worker_helpers import wait_for, worker_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]

# Django runs on-commit callbacks in the order they were registered: the first one kills
# the process after COMMIT returned and before the outbox's own callback.
WEB_PROCESS = textwrap.dedent("""
    import os, signal, sys
    import django
    django.setup()
    from django.db import transaction
    from django_taskrunner import dispatch_on_commit
    from tests.testapp.models import Note

    with transaction.atomic():
        Note.objects.create(text="saved by the web process")
        transaction.on_commit(lambda: os.kill(os.getpid(), signal.SIGKILL))
        for n in range(int(sys.argv[1])):
            message = dispatch_on_commit("tests.testapp.tasks.noop", {"n": f"web-{n}"})
            print(message.id, flush=True)
""")


def test_a_web_process_killed_after_commit_before_the_callback_loses_nothing(
        prefix, redis_target):
    web = subprocess.run(  # noqa: S603 - our own arguments
        [sys.executable, "-c", WEB_PROCESS, "5"], cwd=ROOT, capture_output=True,
        env=worker_env(prefix, redis_target), timeout=60, check=False)
    assert web.returncode == -signal.SIGKILL, web.stderr.decode()
    ids = web.stdout.decode().split()
    assert len(ids) == 5

    assert Note.objects.filter(text="saved by the web process").count() == 1
    assert sorted(OutboxMessage.objects.values_list("message_id", flat=True)) == sorted(ids)
    client = get_store().client
    assert client.xlen(keys.stream_key(prefix, "default")) == 0  # nothing reached Redis

    with worker_thread():  # its leader flushes the outbox; the worker runs the tasks
        wait_for(lambda: client.hlen(runs_key()) == 5, timeout=30)
        wait_for(lambda: not OutboxMessage.objects.exists(), timeout=10)
    counts = {key.decode(): int(value) for key, value in client.hgetall(runs_key()).items()}
    assert counts == {f"noop:web-{n}": 1 for n in range(5)}
