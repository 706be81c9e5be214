"""The wire format: versioned JSON, tolerant of extra and missing optional fields."""

from __future__ import annotations

import json

import pytest

from django_taskrunner import InvalidTaskPayload, TaskMessage


def test_a_message_survives_a_round_trip():
    message = TaskMessage(id="abc", task_name="app.tasks.t", queue="q", payload={"a": [1, "x"]},
                          attempt=2, dispatched_at_ms=1_700_000_000_000, lock_key="k",
                          unique_mode="until_finished", expires_at_ms=1_700_000_100_000)
    decoded = TaskMessage.from_json(message.to_json(), stream_id="1-0")
    assert decoded == message
    assert decoded.stream_id == "1-0"
    assert decoded.dispatched_at.year == 2023


def test_unknown_fields_are_ignored_and_missing_optional_ones_defaulted():
    raw = json.dumps({"v": 1, "id": "x", "task": "t", "future_field": {"ok": True}})
    message = TaskMessage.from_json(raw)
    assert (message.payload, message.attempt, message.lock_key) == (None, 1, None)


@pytest.mark.parametrize("raw", [
    b"not json",
    b"\xff\xfe",
    b"[1,2]",
    b'"a string"',
    b'{"v": 2, "id": "x", "task": "t"}',
    b'{"id": "x", "task": "t"}',
    b'{"v": 1, "task": "t"}',
    b'{"v": 1, "id": "", "task": "t"}',
    b'{"v": 1, "id": "x", "task": 5}',
    b'{"v": 1, "id": "x", "task": "t", "attempt": "many"}',
    b'{"v": 1, "id": "x", "task": "t", "attempt": 0}',
])
def test_malformed_messages_raise_invalid_task_payload(raw):
    with pytest.raises(InvalidTaskPayload):
        TaskMessage.from_json(raw)


@pytest.mark.parametrize("payload", [object(), {1, 2}, float("nan"), {"when": b"bytes"}])
def test_a_payload_that_is_not_json_is_refused_naming_the_task(payload):
    message = TaskMessage(id="x", task_name="shop.tasks.send", queue="q", payload=payload)
    with pytest.raises(InvalidTaskPayload, match="shop.tasks.send"):
        message.to_json()
