"""The workflow field of a message (`wf`): carried through the wire format, checked on
the way in (the worker builds key names from it)."""

from __future__ import annotations

import json

import pytest

from django_taskrunner import TaskMessage
from django_taskrunner.exceptions import InvalidTaskPayload


def body(**extra: object) -> str:
    return json.dumps({"v": 1, "id": "abc", "task": "t", "queue": "default", "payload": {},
                       **extra})


def test_a_message_without_a_workflow_has_none_and_writes_none():
    message = TaskMessage.from_json(body())
    assert message.workflow is None
    assert '"wf"' not in message.to_json()


def test_the_workflow_field_round_trips():
    workflow = {"id": "f00d", "j": 3, "k": 1, "nx": ["default", "other#1"]}
    message = TaskMessage.from_json(body(wf=workflow))
    assert message.workflow == workflow
    assert TaskMessage.from_json(message.to_json()).workflow == workflow


@pytest.mark.parametrize("bad", [
    "x", [], {"id": "a:b", "j": 0, "k": 0}, {"id": "ab", "j": -1, "k": 0},
    {"id": "ab", "j": 0, "k": "0"}, {"id": "ab", "j": 0, "k": 0, "nx": [""]},
    {"id": "ab", "j": True, "k": 0}, {"j": 0, "k": 0},
])
def test_a_bad_workflow_field_is_refused(bad):
    with pytest.raises(InvalidTaskPayload, match="'wf'"):
        TaskMessage.from_json(body(wf=bad))


def test_a_later_steps_expiry_counts_from_its_stream_entry():
    raw = body(wf={"id": "ab", "j": 1, "k": 1, "xr": 5000})
    assert TaskMessage.from_json(raw).expires_at_ms is None
    message = TaskMessage.from_json(raw, stream_id="1700000000000-3")
    assert message.expires_at_ms == 1700000005000
    # a retry's body carries the absolute expiry: it stays the first sending's
    again = TaskMessage.from_json(message.to_json(), stream_id="1800000000000-0")
    assert again.expires_at_ms == 1700000005000
