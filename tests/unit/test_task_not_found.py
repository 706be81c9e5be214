"""A dispatch by a name no task has says which registered names come close."""

from __future__ import annotations

import pytest

from django_taskrunner import TaskNotFound, dispatch, task
from tests.internals import saved_registry


@pytest.fixture(autouse=True)
def restore_registry():
    with saved_registry():
        yield


def test_a_misspelt_name_is_answered_with_the_registered_name_it_resembles():
    @task(name="shop.tasks.send_receipt")
    def send_receipt(payload):
        return payload

    with pytest.raises(TaskNotFound) as caught:
        dispatch("shop.tasks.send_reciept", {"order": 1})

    assert "Did you mean 'shop.tasks.send_receipt'?" in str(caught.value)
    assert caught.value.task_name == "shop.tasks.send_reciept"


def test_a_name_like_no_registered_one_gets_no_suggestion():
    with pytest.raises(TaskNotFound) as caught:
        dispatch("zzz.qqq", {})

    assert "Did you mean" not in str(caught.value)
    assert "is registered" in str(caught.value)

