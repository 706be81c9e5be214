"""Purging a fair queue from the queues dashboard also drops the tasks waiting for
their key's turn, its ring and its turns (docs/flow-control.md, "Fair queues")."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from django_taskrunner import dispatch_many
from django_taskrunner.store import get_store
from tests.django.admin_helpers import logged_in
from tests.testapp.tasks import noop

pytestmark = pytest.mark.django_db(transaction=True)

PURGE = "/admin/django_taskrunner/queue/purge/"


def test_a_purge_counts_and_removes_the_tasks_waiting_for_a_turn():
    root = logged_in(User.objects.create_superuser("root", password="pw"))  # noqa: S106
    dispatch_many(noop, [{"n": n} for n in range(4)], fair_key="acct-1")
    dispatch_many(noop, [{"n": n} for n in range(2)], fair_key="acct-2", priority=8)
    noop.dispatch({"n": 9})

    confirm = root.post(PURGE, {"queue": "default"}).content.decode()
    done = root.post(PURGE, {"queue": "default", "confirm": "yes"}, follow=True)

    assert "7 waiting messages" in confirm
    assert "removed 7 waiting message(s)" in done.content.decode()
    broker = get_store().streams
    assert not broker.client.keys(f"{broker.prefix}:*fair*")
