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
def workload(run_burst, virtual_run_time):
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


def test_the_table_shows_lag_failures_consumers_and_the_leader(run_burst, r, prefix):
    from django_taskrunner import LeaderElection
    from django_taskrunner.store import get_store, keys
    from tests.testapp.tasks import always_fails

    always_fails.dispatch({"n": 1})
    run_burst("--queue", "default", "--consumer-name", "ops-7")
    noop.dispatch_many({"n": n} for n in range(2))
    LeaderElection(r, keys.leader_key(prefix, get_store().group), lease=30,
                   identity="ops-7:beef").try_acquire()

    text = run("-Q", "default")

    header, default = (line.split() for line in text.splitlines()[:2])
    row = dict(zip(header, default, strict=True))
    assert (row["lag"], row["failed/1h"], row["length"]) == ("2", "1", "2")
    assert row["pickup-avg"] != "-" and row["pickup-p95"] != "-"  # 3 attempts picked up
    assert "picked up within" in text
    # It stopped cleanly: it left the consumer group, so no "no heartbeat" row is left.
    assert not [line for line in text.splitlines() if "ops-7" in line
                and not line.startswith("leader")]
    assert text.rstrip().splitlines()[-1].startswith("leader: ops-7:beef (group ")


def test_json_has_the_dashboard_figures(run_burst):
    noop.dispatch({"n": 1})
    run_burst("--queue", "default", "--consumer-name", "ops-8")

    [figures] = json.loads(run("--json", "-Q", "default"))

    assert figures["lag"] == 0 and figures["lag_source"] == "redis"
    assert figures["failed_last_hour"] == 0 and len(figures["minutes"]) == 60
    assert figures["consumers"] == []  # it stopped cleanly and left the group
    assert figures["leader"]["holder"] is None


def test_a_fair_queue_lists_the_keys_with_the_most_waiting_tasks():
    noop.dispatch_many([{"n": n} for n in range(5)], fair_key="acct-big")
    noop.dispatch_many([{"n": n} for n in range(2)], fair_key="acct-small")

    text = run("--queue", "default")
    payload = json.loads(run("--queue", "default", "--json"))

    fair = text.split("\n\n")[-2].splitlines()
    assert fair[0].split()[:3] == ["queue", "fair", "key"]
    assert [line.split() for line in fair[1:]] == [["default", "acct-big", "5"],
                                                   ["default", "acct-small", "2"]]
    assert payload[0]["fair_keys"] == [{"key": "acct-big", "waiting": 5},
                                       {"key": "acct-small", "waiting": 2}]


def test_a_fair_queues_tasks_without_a_key_are_listed_as_one_more_key():
    noop.dispatch_many([{"n": n} for n in range(3)], fair_key="acct-big")
    noop.dispatch_many([{"n": n} for n in range(2)])  # the queue is fair: one more turn

    text = run("--queue", "default")
    payload = json.loads(run("--queue", "default", "--json"))

    fair = text.split("\n\n")[-2].splitlines()
    rows = [(line.split(None, 1)[0], line.split(None, 1)[1].rsplit(None, 1)[0].strip(),
             line.rsplit(None, 1)[1]) for line in fair[1:]]
    assert rows == [("default", "acct-big", "3"), ("default", "(no key)", "2")]
    assert payload[0]["fair_keys"] == [{"key": "acct-big", "waiting": 3},
                                       {"key": "", "waiting": 2}]
