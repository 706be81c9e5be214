"""The executor's connection hygiene (worker/executor.py): what Django's
close_old_connections() closes, it closes; it only looks the connections up less often."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections

from django_taskrunner.worker.executor import check_connections as check

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_connection_within_its_age_stays_open(settings):
    connection.ensure_connection()
    connection.close_at = time.monotonic() + 600
    check()
    assert connection.connection is not None
    check()
    assert connection.connection is not None


def test_a_connection_past_its_age_is_closed_at_the_next_check():
    connection.ensure_connection()
    connection.close_at = time.monotonic() + 600
    check()  # the thread's list of connections is made here
    connection.close_at = time.monotonic() - 1
    check()
    assert connection.connection is None


def test_a_connection_opened_after_the_list_was_made_is_checked():
    connection.ensure_connection()
    connection.close_at = time.monotonic() + 600
    check()
    connection.close()
    connection.ensure_connection()  # a task reconnects: connection_created
    connection.close_at = time.monotonic() - 1
    check()
    assert connection.connection is None


def test_a_connection_after_an_error_is_kept_only_if_usable():
    connection.ensure_connection()
    connection.close_at = time.monotonic() + 600
    check()
    connection.errors_occurred = True
    check()  # still usable: kept, and the error flag cleared, as Django does
    assert connection.connection is not None
    assert connection.errors_occurred is False
    if connection.vendor == "sqlite":  # SQLite's connections are always "usable"
        return
    connection.errors_occurred = True
    connection.connection.close()  # broken under Django's feet
    check()
    assert connection.connection is None


def test_a_connection_left_out_of_autocommit_is_closed():
    connection.ensure_connection()
    connection.close_at = time.monotonic() + 600
    check()
    connection.set_autocommit(False)
    check()
    assert connection.connection is None


def test_a_thread_without_a_connection_opens_none():
    seen = []

    def run() -> None:
        check()
        check()
        seen.append(connections["default"].connection)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == [None]
