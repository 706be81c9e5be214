"""dispatch() and friends: validation, return values, transactions, signals, views."""

from __future__ import annotations

import json

import pytest
from django.db import transaction
from django.db.models.signals import post_save

from django_taskrunner import (
    InvalidTaskPayload,
    RedisUnavailable,
    TaskNotFound,
    dispatch,
    dispatch_many,
    dispatch_on,
    dispatch_on_commit,
)
from django_taskrunner.exceptions import InvalidTaskOptions
from django_taskrunner.store import get_store, keys
from tests.internals import registered_names, stream_messages
from tests.testapp.models import Note
from tests.testapp.tasks import noop, on_other_queue


def test_tasks_modules_of_installed_apps_are_autodiscovered():
    assert "tests.testapp.tasks.noop" in registered_names()
    assert "tests.testapp.tasks.creates_row" in registered_names()


def test_dispatch_returns_the_message_it_queued():
    message = dispatch("tests.testapp.tasks.noop", {"n": 1})
    assert message.task_name == "tests.testapp.tasks.noop"
    assert message.queue == "default"
    assert message.payload == {"n": 1}
    assert message.attempt == 1
    assert message.dispatched_at.tzinfo is not None
    [queued] = stream_messages()
    assert queued.id == message.id and queued.payload == {"n": 1}


def test_the_task_queue_and_a_per_call_queue_are_honoured():
    assert on_other_queue.dispatch({"n": 1}).queue == "other"
    assert noop.dispatch({"n": 2}, queue="urgent").queue == "urgent"
    assert len(stream_messages("other")) == 1
    assert len(stream_messages("urgent")) == 1


def test_an_unknown_task_name_raises_task_not_found():
    with pytest.raises(TaskNotFound, match="no.such.task"):
        dispatch("no.such.task", {})


@pytest.mark.parametrize("payload", [object(), {"d": {1, 2}}, float("inf")])
def test_a_payload_that_is_not_json_raises_and_queues_nothing(payload):
    with pytest.raises(InvalidTaskPayload, match="tests.testapp.tasks.noop"):
        noop.dispatch(payload)
    assert stream_messages() == []


def test_bad_arguments_get_clear_errors():
    with pytest.raises(InvalidTaskOptions):
        noop.dispatch({}, queue="bad:queue")
    with pytest.raises(TypeError):
        dispatch(42, {})
    with pytest.raises(InvalidTaskOptions):
        noop.dispatch({}, expires=-1)


def test_dispatch_many_queues_all_or_nothing():
    messages = dispatch_many(noop, [{"n": i} for i in range(5)])
    assert [m.payload["n"] for m in stream_messages()] == [0, 1, 2, 3, 4]
    assert len({m.id for m in messages}) == 5
    with pytest.raises(InvalidTaskPayload):
        dispatch_many(noop, [{"n": 5}, {"n": object()}])
    assert len(stream_messages()) == 5


def test_dispatch_raises_redis_unavailable_when_redis_is_down(taskrunner_settings):
    taskrunner_settings(REDIS_URL="redis://127.0.0.1:1/0", CONNECT_TIMEOUT=0.5)
    with pytest.raises(RedisUnavailable):
        noop.dispatch({"n": 1})


@pytest.mark.django_db(transaction=True)
def test_dispatch_on_commit_waits_for_the_commit_and_drops_on_rollback():
    with transaction.atomic():
        dispatch_on_commit(noop, {"n": "committed"})
        assert stream_messages() == []
    assert [m.payload for m in stream_messages()] == [{"n": "committed"}]

    with pytest.raises(RuntimeError):
        with transaction.atomic():
            dispatch_on_commit(noop, {"n": "rolled back"})
            raise RuntimeError
    assert len(stream_messages()) == 1


@pytest.mark.django_db(transaction=True)
def test_dispatch_on_commit_checks_the_payload_at_once():
    with pytest.raises(InvalidTaskPayload):
        with transaction.atomic():
            dispatch_on_commit(noop, {"n": object()})


@pytest.mark.django_db(transaction=True)
def test_dispatch_on_a_signal_sends_the_payload_after_commit_when_wanted():
    receiver = dispatch_on(
        post_save, noop, sender=Note,
        payload=lambda instance, **kw: {"n": instance.text},
        when=lambda created, **kw: created,
    )
    try:
        with transaction.atomic():
            note = Note.objects.create(text="hello")
            assert stream_messages() == []
        note.text = "edited"
        note.save()  # not created: `when` says no
    finally:
        assert receiver.disconnect()  # connected under a dispatch_uid
    assert [m.payload for m in stream_messages()] == [{"n": "hello"}]


def test_dispatch_view_answers_202_with_the_id(client):
    response = client.post("/dispatch/noop/", data=json.dumps({"n": 9}),
                           content_type="application/json")
    assert response.status_code == 202
    [queued] = stream_messages()
    assert response.json()["id"] == queued.id
    assert queued.payload == {"n": 9}


def test_dispatch_view_answers_400_on_a_body_that_is_not_json(client):
    response = client.post("/dispatch/noop/", data="{nope", content_type="application/json")
    assert response.status_code == 400
    assert stream_messages() == []


def test_dispatch_view_refuses_get(client):
    assert client.get("/dispatch/noop/").status_code == 405


# -- payload limits: every dispatch path refuses what the worker could not use (bug 13) ----

def deep_list(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


BAD_PAYLOADS = {
    "lone surrogate": "\udcff",
    "lone surrogate in a key": {"\ud800": 1},
    "nested 995 deep": deep_list(995),
    "nested 3000 deep": deep_list(3000),
    "nested past the limit": deep_list(101),
    "over the size limit": "x" * (4 * 1024 * 1024),
}


@pytest.mark.parametrize("payload", BAD_PAYLOADS.values(), ids=BAD_PAYLOADS.keys())
def test_a_payload_past_the_limits_raises_invalid_task_payload_naming_the_task(payload):
    from datetime import timedelta

    from django.utils import timezone

    from django_taskrunner import dispatch_delayed, schedule_for
    from tests.testapp.tasks import unique_order

    calls = {
        "dispatch": lambda: dispatch(noop, payload),
        "dispatch_many": lambda: dispatch_many(noop, [{"n": 1}, payload]),
        "dispatch_delayed": lambda: dispatch_delayed(noop, payload, delay=60),
        "schedule_for": lambda: schedule_for(noop, payload,
                                             when=timezone.now() + timedelta(minutes=1)),
        "unique dispatch": lambda: dispatch(noop, payload, unique_for=60,
                                            unique_key=lambda p: "k"),
        "unique dispatch_many": lambda: dispatch_many(unique_order,
                                                      [{"order": "1", "data": payload}]),
    }
    for name, call in calls.items():
        with pytest.raises(InvalidTaskPayload, match="task 'tests.testapp.tasks.") as caught:
            call()
        assert caught.value.task_name is not None, name
    assert stream_messages() == []
    assert get_store().client.zcard(keys.delayed_key(get_store().prefix, "default")) == 0


@pytest.mark.parametrize("payload", ["\udcff", {"k": "\udcff"}, deep_list(995)])
def test_a_unique_key_from_payload_key_gets_the_payload_error_not_an_options_error(payload):
    from django_taskrunner import payload_key

    with pytest.raises(InvalidTaskPayload):
        dispatch(noop, payload, unique_for=60, unique_key=payload_key)


def test_a_payload_at_the_limits_is_dispatched_and_reads_back():
    from django_taskrunner.core.message import PAYLOAD_MAX_DEPTH

    noop.dispatch(deep_list(PAYLOAD_MAX_DEPTH))
    noop.dispatch({"text": "\U0001f600 é"})
    assert [m.payload for m in stream_messages()] == [deep_list(PAYLOAD_MAX_DEPTH),
                                                      {"text": "\U0001f600 é"}]


@pytest.mark.parametrize("body", [
    b'"\\udcff"', b'{"a": "\\ud800"}', b"[" * 2000 + b"]" * 2000, b"[" * 150 + b"]" * 150,
    b'{"n": 1e400}', b"NaN", b"\xff",
], ids=["surrogate", "surrogate in object", "2000 deep", "150 deep", "overflow", "nan",
        "not utf-8"])
def test_dispatch_view_answers_400_not_500_on_a_payload_dispatch_refuses(client, body):
    response = client.post("/dispatch/noop/", data=body, content_type="application/json")
    assert response.status_code == 400
    assert "error" in response.json()
    assert stream_messages() == []
