"""The view helpers answer 409 with the holder's id when a unique lock or task id is taken."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from django_taskrunner.store import get_store
from django_taskrunner.views import dispatch_response

pytestmark = pytest.mark.django_db(transaction=True)


def post(client, name: str, payload: object):
    return client.post(reverse(name), data=json.dumps(payload), content_type="application/json")


def test_a_duplicate_unique_dispatch_answers_409_with_the_holder_id(client, r):
    first = post(client, "dispatch-unique-order", {"order": "order-123"})
    assert first.status_code == 202
    holder = first.json()["id"]

    second = post(client, "dispatch-unique-order", {"order": "order-123"})
    other = post(client, "dispatch-unique-order", {"order": "order-456"})

    assert second.status_code == 409
    assert second.json()["holder_id"] == holder
    assert "order-123" in second.json()["error"]
    assert other.status_code == 202
    assert get_store().streams.length("default") == 2


def test_a_taken_task_id_answers_409_with_that_id(client, r):
    assert post(client, "dispatch-nightly-report", {"n": 1}).status_code == 202

    again = post(client, "dispatch-nightly-report", {"n": 2})

    assert again.status_code == 409
    assert again.json()["holder_id"] == "nightly-report"
    assert get_store().streams.length("default") == 1


def test_bad_unique_options_answer_400(r):
    response = dispatch_response("tests.testapp.tasks.noop", {}, unique_mode="until_executed")

    assert response.status_code == 400
    assert "unique_for" in json.loads(response.content)["error"]


def test_a_unique_key_function_failing_on_the_posted_body_answers_400(client, r):
    response = post(client, "dispatch-unique-order", {"no_order_field": 1})

    assert response.status_code == 400
    assert "unique_key of task 'tests.testapp.tasks.unique_order' raised KeyError" in (
        response.json()["error"])
