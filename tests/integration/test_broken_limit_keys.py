"""A limit key that holds another Redis type (or that Redis refuses otherwise) is no
fault of the task it limits: the error is logged once with the key, the task waits and
tries again, and it runs once the key is fixed; other keys and the worker go on."""

from __future__ import annotations

import logging

import pytest

from django_taskrunner import lookup
from django_taskrunner.models import FailedTask
from django_taskrunner.store import get_store, keys
from tests.integration.scheduling_helpers import leads, running_worker, wait_for
from tests.testapp.limit_tasks import LIMITS_QUEUE, five_a_second, limit_runs_key, one_per_key

pytestmark = pytest.mark.django_db(transaction=True)


def limit_key(kind: str, task_name: str, key: str) -> str:
    return keys.limit_key(get_store().prefix, LIMITS_QUEUE, kind, task_name, key)


def test_a_concurrency_key_of_the_wrong_type_makes_its_tasks_wait_not_fail(r, caplog):
    # Given the concurrency key "bad" holds a string, not a sorted set
    bad = limit_key("concurrency", one_per_key.name, "bad")
    r.set(bad, "not a sorted set")
    with caplog.at_level(logging.ERROR), running_worker(LIMITS_QUEUE) as worker:
        wait_for(lambda: leads(worker), 10)
        # When two tasks of that key and one of a good key are dispatched
        stuck = one_per_key.dispatch_many([{"k": "bad", "n": f"bad{n}", "hold": 0}
                                           for n in range(2)])
        one_per_key.dispatch({"k": "good", "n": "good", "hold": 0})

        # Then the good one runs, the bad ones wait (delayed, not failed)
        wait_for(lambda: r.hget(limit_runs_key(), "one_per_key:good"), 20)
        wait_for(lambda: all(lookup(m.id).status == "delayed" for m in stuck), 20)
        assert not FailedTask.objects.exists()
        # the key's error is logged once, naming the key, although both tasks met it
        wait_for(lambda: any(bad in rec.getMessage() for rec in caplog.records), 10)

        # When the key is fixed, they run, once each, on their first attempt
        r.delete(bad)
        wait_for(lambda: all(lookup(m.id).status == "succeeded" for m in stuck), 30)
    runs = r.hgetall(limit_runs_key())
    assert runs[b"one_per_key:bad0"] == runs[b"one_per_key:bad1"] == b"1"
    assert {lookup(m.id).attempt for m in stuck} == {1}
    assert not FailedTask.objects.exists()
    assert len([rec for rec in caplog.records if bad in rec.getMessage()
                and rec.levelno >= logging.ERROR]) == 1


def test_a_rate_key_of_the_wrong_type_makes_its_tasks_wait_not_fail(r):
    # Given the rate key of five_a_second holds a hash
    bad = limit_key("rate", five_a_second.name, "")
    r.hset(bad, "x", "1")
    with running_worker(LIMITS_QUEUE) as worker:
        wait_for(lambda: leads(worker), 10)
        # When one is dispatched, it waits, not failed
        message = five_a_second.dispatch({"n": 1})
        wait_for(lambda: lookup(message.id).status == "delayed", 20)
        assert not FailedTask.objects.exists()
        # and once the key is deleted it runs
        r.delete(bad)
        wait_for(lambda: lookup(message.id).status == "succeeded", 30)
    assert r.hget(limit_runs_key(), "five_a_second:1") == b"1"
    assert not FailedTask.objects.exists()
