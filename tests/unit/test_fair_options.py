"""`fair_key` and `fair_weight` are checked when declared and per dispatch (before Redis
is asked); a message keeps its key and weight on the wire; the fair keys of a queue
share its slot."""

from __future__ import annotations

import pytest

from django_taskrunner import InvalidTaskOptions, TaskMessage, task
from django_taskrunner.core.dispatch import prepare
from django_taskrunner.exceptions import InvalidTaskPayload
from django_taskrunner.store import keys
from tests.internals import saved_registry


@pytest.fixture(autouse=True)
def restore_registry():
    with saved_registry():
        yield


@pytest.mark.parametrize("bad", ["acct", 3, {"k": 1}])
def test_a_declared_fair_key_must_be_a_callable(bad):
    with pytest.raises(InvalidTaskOptions, match="fair_key of task 'fair.bad'"):
        @task(name="fair.bad", fair_key=bad)
        def bad_task(payload):
            pass


@pytest.mark.parametrize("bad", [{"A": 0}, {"default": 1001}, {"A": True}, {"A": 1.5}, 3])
def test_a_declared_weight_mapping_is_checked(bad):
    with pytest.raises(InvalidTaskOptions, match="fair_weight of task 'fair.bad'"):
        @task(name="fair.bad", fair_key=str, fair_weight=bad)
        def bad_task(payload):
            pass


def test_a_weight_callable_is_checked_at_dispatch_and_its_weight_kept():
    @task(name="fair.weights", fair_key=lambda payload: payload,
          fair_weight=lambda key: {"gold": 3, "bad": 0}.get(key, 1))
    def weighted(payload):
        pass

    gold, _claim = prepare(weighted, "gold")
    plain, _claim = prepare(weighted, "other")
    assert (gold.fair_key, gold.fair_weight) == ("gold", 3)
    assert (plain.fair_key, plain.fair_weight) == ("other", None)  # 1 is left out
    with pytest.raises(InvalidTaskOptions, match="from 1 to 1000, not 0"):
        prepare(weighted, "bad")


def test_the_key_and_weight_travel_on_the_wire_and_are_checked_when_read():
    @task(name="fair.wire", fair_key=lambda payload: "acct-1", fair_weight={"acct-1": 2})
    def wired(payload):
        pass

    message, _claim = prepare(wired, {})
    read = TaskMessage.from_json(message.to_json())
    assert (read.fair_key, read.fair_weight) == ("acct-1", 2)
    assert '"fk"' not in TaskMessage.from_json(prepare(task(name="fair.none")(print), {})[0]
                                               .to_json()).to_json()
    forged = message.to_json().replace('"fk":"acct-1"', '"fk":""')
    with pytest.raises(InvalidTaskPayload):
        TaskMessage.from_json(forged)


def test_the_fair_keys_of_a_queue_share_its_slot():
    for name in ("emails", "emails#2", "emails!9", "emails#2!1"):
        tag = f"{{{keys.shard_of(name)}}}"
        for key in (keys.fair_ring_key("p", name), keys.fair_turns_key("p", name),
                    keys.fair_list_key("p", name, "acct:{x}")):
            assert key.startswith(f"p:{tag}:"), key
