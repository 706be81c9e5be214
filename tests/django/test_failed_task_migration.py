"""Migration 0004: rows written before it stay readable, with a blank dispatch token."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

pytestmark = pytest.mark.django_db(transaction=True)

APP = "django_taskrunner"
BEFORE = [(APP, "0003_uniquelock_queue")]
AFTER = [(APP, "0004_failedtask_dispatch_token")]
DISPATCH = "a1"  # a dispatch token


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def test_an_old_row_gets_a_blank_token_and_a_second_dispatch_of_its_id_may_be_recorded():
    try:
        old_apps = migrate(BEFORE)
        old_apps.get_model(APP, "FailedTask").objects.create(
            task_name="t", queue="default", message_id="nightly", payload="{}",
            failed_at=timezone.now())

        new_model = migrate(AFTER).get_model(APP, "FailedTask")
        old_row = new_model.objects.get()
        assert (old_row.message_id, old_row.dispatch_token) == ("nightly", "")
        new_model.objects.create(task_name="t", queue="default", message_id="nightly",
                                 dispatch_token=DISPATCH, payload="{}", failed_at=timezone.now())
        with pytest.raises(IntegrityError), transaction.atomic():
            new_model.objects.create(task_name="t", queue="default", message_id="nightly",
                                     dispatch_token=DISPATCH, payload="{}",
                                     failed_at=timezone.now())
        assert new_model.objects.count() == 2
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes(APP))
