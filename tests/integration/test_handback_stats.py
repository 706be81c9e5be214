"""The attempts a supervisor settles for a child that died count in the queue's figures
(`get_stats`, `taskrunner_stats`) as failed runs, retried or failed for good."""

from __future__ import annotations

import pytest

from django_taskrunner import get_stats
from django_taskrunner.store import get_store
from django_taskrunner.worker.reclaim import Started, hand_back
from tests.worker_helpers import app_monotonic

pytestmark = pytest.mark.django_db(transaction=True)


def read_as(r, consumer: str) -> list[str]:
    broker = get_store().streams
    broker.ensure_group("default")
    reply = r.xreadgroup(broker.group, consumer, {broker.stream("default"): ">"}, count=10)
    return [stream_id.decode() for stream_id, _fields in reply[0][1]] if reply else []


def died_running(r, task, consumer: str, adopters: list[str]) -> None:
    """`task` dispatched, fetched by `consumer`, which died running it; handed back."""
    task.dispatch({"n": 1})
    [stream_id] = read_as(r, consumer)
    running = {("default", stream_id): Started("default", stream_id, app_monotonic() - 0.5)}
    done = hand_back(get_store().streams, consumer, ["default"], running,
                     "killed by signal 9 (SIGKILL)", adopters)
    assert done.failed_attempts == 1


def figures(name: str) -> tuple[int, int, int, int]:
    stats = get_stats("default")
    [task] = [task for task in stats.tasks if task.name == name]
    assert (stats.runs, stats.retried, stats.failed) == (task.runs, task.retried, task.failed)
    return task.runs, task.errors, task.retried, task.failed


@pytest.mark.parametrize("adopters", [[], ["alive-0.0"]], ids=["queue", "sibling"])
def test_a_dead_childs_running_attempt_with_retries_left_counts_as_a_failed_run_retried(
        r, adopters):
    from tests.testapp.tasks import always_fails  # max_retry=2, retry_backoff=0

    died_running(r, always_fails, "dead-1.0", adopters)
    assert figures(always_fails.name) == (1, 1, 1, 0)


@pytest.mark.parametrize("adopters", [[], ["alive-0.0"]], ids=["queue", "sibling"])
def test_a_dead_childs_running_attempt_past_its_retries_counts_as_failed(r, adopters):
    from tests.testapp.tasks import noop  # max_retry=0

    died_running(r, noop, "dead-1.0", adopters)
    assert figures(noop.name) == (1, 1, 0, 1)
