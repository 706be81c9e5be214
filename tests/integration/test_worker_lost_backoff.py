"""A run that died with its child process is a failed attempt: handed back by the
supervisor, its re-run waits the task's retry_backoff."""

from __future__ import annotations

import pytest

from django_taskrunner import TaskMessage, lookup
from django_taskrunner.store import get_store, keys
from django_taskrunner.worker.reclaim import Started, hand_back
from tests.worker_helpers import app_monotonic, app_now_ms

pytestmark = pytest.mark.django_db(transaction=True)


def read_as(r, consumer: str) -> list[str]:
    broker = get_store().streams
    broker.ensure_group("default")
    reply = r.xreadgroup(broker.group, consumer, {broker.stream("default"): ">"}, count=10)
    return [stream_id.decode() for stream_id, _fields in reply[0][1]] if reply else []


def pending_of(r, consumer: str) -> list[dict]:
    broker = get_store().streams
    return r.xpending_range(broker.stream("default"), broker.group, "-", "+", 100,
                            consumername=consumer)


def delayed(r) -> list[tuple[TaskMessage, float]]:
    """(message, due epoch ms) of each entry of the default queue's delayed set."""
    raw = r.zrange(keys.delayed_key(get_store().prefix, "default"), 0, -1, withscores=True)
    return [(TaskMessage.from_json(body), due) for body, due in raw]


def test_a_handed_back_running_attempt_waits_its_backoff_instead_of_going_to_a_sibling(r):
    from tests.testapp.tasks import fails_then_retries_later  # max_retry=1, backoff 60 s

    # Given a dead child that was running a task whose retries wait 60 s
    message = fails_then_retries_later.dispatch({"n": 1})
    [stream_id] = read_as(r, "dead-1.0")
    running = {("default", stream_id): Started("default", stream_id, app_monotonic())}
    # When its messages are handed back with a live sibling
    before = app_now_ms()
    done = hand_back(get_store().streams, "dead-1.0", ["default"], running,
                     "killed by signal 9 (SIGKILL)", ["alive-0.0"])
    # Then the attempt counts as failed and its retry waits the backoff, not on the sibling
    assert done.failed_attempts == 1 and done.adopted == {}
    assert pending_of(r, "alive-0.0") == [] and pending_of(r, "dead-1.0") == []
    [(retried, due)] = delayed(r)
    assert retried.id == message.id and retried.attempt == 2
    assert due >= before + 59_000
    record = lookup(message.id)
    assert record is not None and record.status == "retrying"
    assert "SIGKILL" in (record.error or ""), record.error
