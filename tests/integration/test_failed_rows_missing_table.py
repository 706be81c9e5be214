"""A task that fails for good while its FailedTask row cannot be written (here: the
database lacks the table) is finished all the same, through the Tasks backend too: its
record says "failed", its entry is acked, and the row is written once the table is
back. Runs on any database (the PostgreSQL outage is test_failed_rows_database_down)."""

from __future__ import annotations

import pytest
from django.db import connection

from django_taskrunner import lookup
from django_taskrunner.compat import TaskResultStatus
from django_taskrunner.models import FailedTask
from django_taskrunner.store import get_store
from tests.integration.scheduling_helpers import leads, running_worker, wait_for
from tests.testapp import framework_tasks
from tests.testapp.tasks import always_fails, runs_key

pytestmark = pytest.mark.django_db(transaction=True)

TABLE = FailedTask._meta.db_table


def rename(old: str, new: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER TABLE "{old}" RENAME TO "{new}"')


def test_a_failure_without_its_table_is_finished_and_its_row_written_later(r):
    broker = get_store().streams
    kept = broker.store.failed_rows
    with running_worker("default") as worker:
        wait_for(lambda: leads(worker), 10)
        # Given the database lacks the FailedTask table
        rename(TABLE, f"{TABLE}_away")
        try:
            # When a task and a framework task fail for good
            failed = always_fails.dispatch({"n": "no-table"})
            result = framework_tasks.fails.enqueue("no table")

            # Then both finish: "failed" / FAILED, acked, run 3 times (its attempts) only
            wait_for(lambda: lookup(failed.id).status == "failed", 30)
            wait_for(lambda: (result.refresh(), result.status)[1] == TaskResultStatus.FAILED,
                     30)
            wait_for(lambda: r.xpending(broker.stream("default"), broker.group)["pending"]
                     == 0, 30)
            assert r.hget(runs_key(), "always_fails:no-table") == b"3"
            assert kept.count() == 2
        finally:
            rename(f"{TABLE}_away", TABLE)

        # When the table is back, the leader writes each row once
        wait_for(lambda: kept.count() == 0, 90)
    assert sorted(FailedTask.objects.values_list("message_id", flat=True)) == sorted(
        [failed.id, result.id])
    assert FailedTask.objects.get(message_id=failed.id).attempts == 3
