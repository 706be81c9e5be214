"""`priority` is checked when declared and per dispatch (before Redis is asked): an int
0..9, not a bool; a bad one is an `InvalidTaskOptions` naming the task and the value.
Level names and their keys share the slot of their shard."""

from __future__ import annotations

import pytest

from django_taskrunner import (
    InvalidTaskOptions,
    TaskMessage,
    dispatch,
    dispatch_delayed,
    dispatch_many,
    task,
)
from django_taskrunner.core.dispatch import prepare
from django_taskrunner.store import keys
from tests.internals import saved_registry

BAD = [-1, 10, 1.0, 5.5, "5", True, False, [9], float("nan")]


@pytest.fixture(autouse=True)
def restore_registry():
    with saved_registry():
        yield


@pytest.mark.parametrize("bad", BAD)
def test_a_bad_declared_priority_names_the_task_and_the_value(bad):
    with pytest.raises(InvalidTaskOptions) as raised:
        @task(name="prio.bad", priority=bad)
        def bad_task(payload):
            pass
    assert "'prio.bad'" in str(raised.value) and repr(bad) in str(raised.value)


@pytest.mark.parametrize("bad", BAD)
def test_a_bad_dispatch_priority_is_refused_before_redis(bad):
    @task(name="prio.fine")
    def fine(payload):
        pass

    for call in (lambda: dispatch(fine, {}, priority=bad),
                 lambda: dispatch_many(fine, [{}], priority=bad),
                 lambda: dispatch_delayed(fine, {}, delay=10, priority=bad),
                 lambda: fine.s({}, priority=bad)):
        with pytest.raises(InvalidTaskOptions) as raised:
            call()
        assert "'prio.fine'" in str(raised.value) and repr(bad) in str(raised.value)


def test_the_priority_travels_in_the_message_and_the_default_is_left_out():
    @task(name="prio.nine", priority=9)
    def nine(payload):
        pass

    message, _claim = prepare(nine, {})
    assert message.priority == 9
    assert TaskMessage.from_json(message.to_json()).priority == 9
    assert prepare(nine, {}, priority=2)[0].priority == 2
    default = prepare(nine, {}, priority=5)[0]
    assert default.priority is None and '"pr"' not in default.to_json()
    assert nine.s({}, priority=0).prepare(0).priority == 0


def test_a_level_shares_its_shards_slot_and_only_its_stream_delayed_and_wake_differ():
    assert keys.level_name("q", None) == keys.level_name("q", 5) == "q"
    assert keys.level_name("q#1", 9) == "q#1!9"
    assert keys.queue_of("q#1!9") == "q" and keys.shard_of("q#1!9") == "q#1"
    assert keys.level_of("q#1!9") == 9 and keys.level_of("q#1") == 5
    assert keys.stream_key("p", "q#1!9") == "p:{q#1}:stream!9"
    assert keys.delayed_key("p", "q!0") == "p:{q}:delayed!0"
    assert keys.wake_channel("p", "q!0") == "p:{q}:wake!0"
    for same in (keys.cancelled_key, keys.unique_key_space, keys.periodic_key):
        assert same("p", "q#1!9") == same("p", "q#1")
    assert keys.task_id_key("p", "q!7", "t") == keys.task_id_key("p", "q", "t")
    assert keys.stream_key("p", "q") == "p:{q}:stream"
