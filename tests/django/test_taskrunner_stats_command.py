"""`manage.py taskrunner_stats`: the figures as tables and as JSON."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from tests.testapp.tasks import noop, sleep_50ms

pytestmark = pytest.mark.django_db(transaction=True)


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("taskrunner_stats", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def workload(run_burst):
    sleep_50ms.dispatch_many({"n": n} for n in range(4))
    run_burst("--queue", "default", "--concurrency", "2")
    noop.dispatch_many({"n": n} for n in range(3))


def test_the_table_shows_every_queue_and_each_task(workload):
    text = run()

    queue_lines = text.split("\n\n")[0].splitlines()
    assert queue_lines[0].split()[:4] == ["queue", "length", "waiting", "pending"]
    default = next(line.split() for line in queue_lines if line.startswith("default"))
    assert default[1:4] == ["3", "3", "0"]  # length, waiting, pending
    assert any(line.startswith("other") for line in queue_lines)
    task_line = next(line for line in text.splitlines()
                     if "tests.testapp.tasks.sleep_50ms" in line)
    assert task_line.split()[2] == "4"  # runs
    assert "ms" in task_line


def test_json_gives_the_same_figures_for_the_queues_asked(workload):
    [figures] = json.loads(run("--json", "--queue", "default"))

    assert figures["queue"] == "default"
    assert (figures["length"], figures["succeeded"]) == (3, 4)
    [task] = figures["tasks"]
    assert task["name"] == "tests.testapp.tasks.sleep_50ms"
    assert 0.05 <= task["average"] < 0.08
    assert figures["predicted_wait"] is None  # tasks wait and no worker is live


def test_a_bad_queue_name_is_refused():
    with pytest.raises(CommandError):
        run("--queue", "{bad}")
