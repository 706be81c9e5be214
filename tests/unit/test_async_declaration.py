"""`@task` tells an `async def` function from a plain one when it is declared."""

from __future__ import annotations

import functools

import pytest

from django_taskrunner import InvalidTaskOptions, Task
from tests.internals import saved_registry


@pytest.fixture(autouse=True)
def restore_registry():
    with saved_registry():
        yield


async def pings(payload):
    return payload


def plain(payload):
    return payload


def test_an_async_def_function_is_marked_async_and_a_plain_one_is_not():
    assert Task(pings, "pings").is_async
    assert not Task(plain, "plain").is_async
    assert Task(functools.partial(pings), "partial").is_async


def test_a_copy_with_changed_options_stays_async():
    assert Task(pings, "pings").using(max_retry=3).is_async


def test_calling_an_async_task_directly_returns_its_coroutine():
    coroutine = Task(pings, "pings")({"n": 1})
    try:
        assert hasattr(coroutine, "__await__")
    finally:
        coroutine.close()


@pytest.mark.parametrize("kind", ["generator", "async generator"])
def test_a_generator_function_is_refused_when_declared(kind):
    def gen(payload):
        yield payload

    async def agen(payload):
        yield payload

    with pytest.raises(InvalidTaskOptions, match="generator function"):
        Task(gen if kind == "generator" else agen, "gen")
