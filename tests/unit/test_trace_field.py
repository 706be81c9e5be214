"""The message's trace context (wire field `tc`): carried when set, a bad one ignored."""

from __future__ import annotations

import json

import pytest

from django_taskrunner import TaskMessage

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def body(**fields: object) -> str:
    return json.dumps({"v": 1, "id": "a" * 32, "task": "t", "queue": "q", **fields})


def test_the_trace_context_round_trips_and_is_left_out_when_unset():
    message = TaskMessage(id="a" * 32, task_name="t", queue="q", payload=None,
                          trace_context=TRACEPARENT)
    assert json.loads(message.to_json())["tc"] == TRACEPARENT
    assert TaskMessage.from_json(message.to_json()).trace_context == TRACEPARENT
    message.trace_context = None
    assert "tc" not in json.loads(message.to_json())


@pytest.mark.parametrize("bad", [
    "", "garbage", 42, True, None, ["00"], {"traceparent": TRACEPARENT},
    TRACEPARENT.upper(), TRACEPARENT + "-extra", "ff" + TRACEPARENT[2:], TRACEPARENT[:-1],
])
def test_a_bad_trace_context_is_ignored_and_the_message_still_decodes(bad):
    message = TaskMessage.from_json(body(tc=bad))
    assert message.trace_context is None
    assert message.task_name == "t"
