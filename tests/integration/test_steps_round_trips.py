"""What a durable step costs in round trips to Redis, pinned: the first step of a task
id's first run writes only (nothing can be kept yet: no read), a step already kept costs
the attempt's one read, and each step run after it one write."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from django_taskrunner import TaskMessage
from django_taskrunner.core.context import first_run, stored_steps
from django_taskrunner.store import Store, get_store
from django_taskrunner.worker.steps import put_back
from tests.internals import PENDING_TTL_S


class Counting:
    """A Redis client that counts its round trips (a command, or a pipeline's execute)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.trips = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.client, name)
        if name == "pipeline":
            return lambda **kw: CountingPipe(self, attr(**kw))
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self.trips += 1
            return attr(*args, **kwargs)

        return call


class CountingPipe:
    def __init__(self, counting: Counting, pipe: Any) -> None:
        self.counting = counting
        self.pipe = pipe

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pipe, name)

    def execute(self) -> Any:
        self.counting.trips += 1
        return self.pipe.execute()


def attempt(client: Counting, task_id: str, *, first: bool) -> Any:
    return stored_steps(Store(client, get_store().prefix), task_id, "t", PENDING_TTL_S,
                        first_run=first)


def test_the_first_step_of_a_first_run_costs_one_round_trip(r):
    client = Counting(r)
    steps = attempt(client, "rt-1", first=True)

    assert steps.run("a", lambda: 1, (), {}) == 1
    assert client.trips == 1  # the write; was 2 (a read first)
    steps.run("b", lambda: 2, (), {})
    assert client.trips == 2


def test_a_step_already_kept_costs_the_attempts_one_read(r):
    client = Counting(r)
    first = attempt(client, "rt-2", first=True)
    first.run("a", lambda: 1, (), {})
    first.run("b", lambda: 2, (), {})
    client.trips = 0

    # A later attempt: the first kept step reads them all, the second costs nothing
    later = attempt(client, "rt-2", first=False)
    assert later.run("a", lambda: pytest.fail("kept: not run again"), (), {}) == 1
    assert client.trips == 1
    assert later.run("b", lambda: pytest.fail("kept: not run again"), (), {}) == 2
    assert client.trips == 1
    # and a step not kept yet costs its write
    assert later.run("c", lambda: 3, (), {}) == 3
    assert client.trips == 2


def test_the_first_step_not_kept_on_a_later_run_reads_then_writes(r):
    client = Counting(r)
    later = attempt(client, "rt-3", first=False)
    later.run("a", lambda: 1, (), {})
    assert client.trips == 2  # it cannot know without reading that nothing was kept


def message(**changes: Any) -> TaskMessage:
    return replace(TaskMessage(id="m-1", task_name="t", queue="default", payload={}),
                   **changes)


def test_only_a_task_ids_first_run_skips_the_read():
    assert first_run(message(), None)
    assert not first_run(message(attempt=2), None)  # a retry
    assert not first_run(message(), 2)  # reclaimed, or handed to a sibling
    assert not first_run(message(has_task_id=True), None)  # an id a caller chose
    assert not first_run(message(ran_before=True), None)  # put back after it may have run


def test_a_message_put_back_on_its_stream_reads_its_steps_next_time():
    body = put_back(message().to_json(), None)
    again = TaskMessage.from_json(body)
    assert again.ran_before and again.attempt == 1
    assert not first_run(again, None)
    # the mark travels with its retries
    assert TaskMessage.from_json(replace(again, attempt=2).to_json()).ran_before
