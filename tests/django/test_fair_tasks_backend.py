"""Django's Tasks framework on a fair queue: the backend's OPTIONS["FAIR_KEY"] names the
key each enqueued task waits its turn with (docs/flow-control.md, "Fair queues")."""

from __future__ import annotations

import pytest

from django_taskrunner.backends import TaskRunnerBackend
from django_taskrunner.compat import TaskResultStatus
from django_taskrunner.store import Store
from tests.testapp import framework_tasks

pytestmark = pytest.mark.django_db(transaction=True)


def account_of(task, args, kwargs):
    return f"acct-{args[0]}"


def test_a_framework_task_waits_for_its_fair_keys_turn_and_runs(run_burst, r, prefix):
    backend = TaskRunnerBackend("default", {"QUEUES": ["default", "framework"], "OPTIONS": {
        "RESULT_TTL": 3600, "FAIR_KEY": "tests.django.test_fair_tasks_backend.account_of"}})

    results = [backend.enqueue(framework_tasks.add, (n % 2, 3), {}) for n in range(4)]

    top = Store(r, prefix).fair.top_keys(framework_tasks.add.queue_name)
    assert [(item.key, item.waiting) for item in top] == [("acct-0", 2), ("acct-1", 2)]
    run_burst()
    for result in results:
        result.refresh()
        assert result.status == TaskResultStatus.SUCCESSFUL
