"""The leader's outbox flusher moving a row its dispatching process had not moved yet is
the normal race of the fast path, not an incident: it logs at DEBUG, not INFO."""

from __future__ import annotations

import logging

import pytest
from django.db import connection, transaction

from django_taskrunner import dispatch
from django_taskrunner.core.outbox import OutboxFlusher
from django_taskrunner.models import OutboxMessage
from tests.testapp.tasks import noop

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_row_the_flusher_moves_first_is_logged_at_debug_only(r, prefix, caplog):
    with transaction.atomic():
        dispatch(noop, {"n": 1}, transactional=True)
        connection.run_on_commit = []  # as if the fast path had not run yet
    caplog.set_level(logging.DEBUG, logger="django_taskrunner.core.outbox")

    assert OutboxFlusher().turn(down=False) is False

    assert not OutboxMessage.objects.exists()
    lines = [(rec.levelno, rec.getMessage()) for rec in caplog.records
             if rec.name == "django_taskrunner.core.outbox"]
    assert lines == [(logging.DEBUG, "outbox: moved 1 task(s) before (or instead of) their "
                                     "dispatching process")]
