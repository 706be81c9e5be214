"""The dispatch token: on the wire as `tok`, checked on decode, and joined to the id in
the value of the lock and task_id a dispatch holds."""

from __future__ import annotations

import json

import pytest

from django_taskrunner import InvalidTaskPayload, TaskMessage
from django_taskrunner.core.unique import holder_id, holder_value, new_dispatch_token


def message(**fields) -> TaskMessage:
    return TaskMessage(id="report#1", task_name="t", queue="q", payload=None, **fields)


def test_the_token_survives_a_round_trip_and_a_message_without_one_reads_as_none():
    token = new_dispatch_token()
    assert len(token) == 16 and token != new_dispatch_token()
    assert TaskMessage.from_json(message(dispatch_token=token).to_json()).dispatch_token == token
    without = message().to_json()
    assert "tok" not in json.loads(without)
    assert TaskMessage.from_json(without).dispatch_token is None


@pytest.mark.parametrize("token", [5, "", "a#b", "x" * 65, ["ab"], True, "tok en"])
def test_a_token_that_is_not_letters_and_digits_is_refused(token):
    raw = json.dumps({"v": 1, "id": "x", "task": "t", "tok": token})
    with pytest.raises(InvalidTaskPayload, match="'tok'"):
        TaskMessage.from_json(raw)


def test_the_holder_is_the_id_and_the_token_and_shows_as_the_id():
    hex_digits = "0123456789abcdef"
    with_token = message(dispatch_token=hex_digits)
    assert holder_value(with_token) == "report#1#0123456789abcdef"
    assert holder_id(holder_value(with_token)) == "report#1"  # a "#" in the id is kept


@pytest.mark.parametrize("value", ["report-1", "report#", "#abc", "a#b c"])
def test_a_value_without_a_token_shows_as_it_is(value):
    assert holder_id(value) == value
    assert holder_value(TaskMessage(id=value, task_name="t", queue="q", payload=None)) == value
