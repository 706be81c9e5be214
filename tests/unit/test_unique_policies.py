"""on_conflict is checked when declared (and per dispatch, before Redis is asked):
clear `InvalidTaskOptions` naming the task and the value."""

from __future__ import annotations

import pytest

from django_taskrunner import InvalidTaskOptions, TaskMessage, task
from django_taskrunner.core.dispatch import prepare
from django_taskrunner.core.message import holder_parts
from django_taskrunner.core.unique import new_dispatch_token
from tests.internals import saved_registry


@pytest.fixture(autouse=True)
def restore_registry():
    with saved_registry():
        yield


def test_on_conflict_defaults_to_raise():
    @task(name="pol.default", unique=True, unique_for=10)
    def default(payload):
        pass

    assert default.options.on_conflict == "raise"


@pytest.mark.parametrize("value", ["return", "replace"])
def test_on_conflict_needs_a_unique_task(value):
    with pytest.raises(InvalidTaskOptions, match=rf"'pol\.plain'.*{value!r}"):
        @task(name="pol.plain", on_conflict=value)
        def plain(payload):
            pass


@pytest.mark.parametrize("value", ["ignore", "", None, 1, "Replace"])
def test_on_conflict_outside_the_three_is_refused(value):
    with pytest.raises(InvalidTaskOptions, match=r"'pol\.bad'.*raise, return, replace"):
        @task(name="pol.bad", unique=True, unique_for=10, on_conflict=value)
        def bad(payload):
            pass


def test_a_per_dispatch_on_conflict_is_checked_before_redis():
    @task(name="pol.unique", unique=True, unique_for=10)
    def unique(payload):
        pass

    @task(name="pol.loose")
    def loose(payload):
        pass

    with pytest.raises(InvalidTaskOptions, match=r"'pol\.unique'.*'skip'"):
        prepare(unique, {}, on_conflict="skip")
    with pytest.raises(InvalidTaskOptions, match=r"'pol\.loose'.*not unique.*'return'"):
        prepare(loose, {}, on_conflict="return")
    # A unique override makes the call unique, so the policy has a lock to meet
    message, claim = prepare(loose, {}, unique_for=5, on_conflict="return")
    assert claim is not None and claim.policy == "return"
    assert prepare(loose, {}, on_conflict="raise")[1] is None


@pytest.mark.parametrize("payload", [{"x": ',"tok":"abc"'}, "a\u00e9\u2028", [1.5, None]])
def test_holder_parts_rebuild_the_body_around_another_id(payload):
    message = TaskMessage(id="new-id", task_name="t", queue="q", payload=payload,
                          dispatch_token=new_dispatch_token(), trace_context=None)
    head, rest = holder_parts(message.to_json(), message)

    rebuilt = TaskMessage.from_json(head + '"held/id"' + ',"tok":"abc123",' + rest)

    assert (rebuilt.id, rebuilt.dispatch_token, rebuilt.payload) == ("held/id", "abc123", payload)
    assert rebuilt.task_name == "t" and rebuilt.queue == "q"


def test_debounce_declares_a_unique_task_without_unique_for():
    @task(name="pol.debounced", unique_mode="debounce", debounce=2.5,
          unique_key=lambda payload: str(payload))
    def debounced(payload):
        pass

    message, claim = prepare(debounced, "x")
    assert claim is not None and claim.lock.mode == "debounce"
    assert claim.lock.ttl_ms == 2500 and claim.lock.debounce_ms == 2500
    assert claim.policy == "debounce"


def test_debounce_needs_its_mode_and_the_mode_needs_debounce():
    with pytest.raises(InvalidTaskOptions, match=r"debounce=5 of task 'pol\.d1'.*'until_finished'"):
        @task(name="pol.d1", unique=True, unique_for=10, debounce=5)
        def d1(payload):
            pass
    with pytest.raises(InvalidTaskOptions, match=r"'pol\.d2'.*no debounce"):
        @task(name="pol.d2", unique_mode="debounce")
        def d2(payload):
            pass


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), True, "5", 8 * 24 * 3600])
def test_debounce_must_be_a_positive_number_of_seconds(value):
    with pytest.raises(InvalidTaskOptions, match=rf"debounce of task 'pol\.d3'.*{value!r}"):
        @task(name="pol.d3", unique_mode="debounce", debounce=value)
        def d3(payload):
            pass


def test_a_per_dispatch_debounce_mode_needs_the_tasks_debounce():
    @task(name="pol.unique2", unique=True, unique_for=10)
    def unique2(payload):
        pass

    with pytest.raises(InvalidTaskOptions, match=r"'pol\.unique2'.*debounce=SECONDS"):
        prepare(unique2, {}, unique_mode="debounce")
