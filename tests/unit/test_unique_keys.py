"""payload_key and lock key derivation: pure functions, no Redis round trip."""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import pytest

from django_taskrunner import (
    InvalidTaskOptions,
    InvalidTaskPayload,
    Task,
    TaskAlreadyDispatched,
    TaskIdConflict,
    UniqueForRequired,
    dispatch,
    payload_key,
)
from django_taskrunner.core.task import TaskOptions
from django_taskrunner.core.unique import LockSpec, UniqueClaim, derive_key, lock_spec


def make_task(name: str = "shop.tasks.t", **options: Any) -> Task:
    return Task(fn=lambda payload: None, name=name, options=TaskOptions(**options))


# -- payload_key ----------------------------------------------------------------------------


def test_payload_key_is_the_sha256_of_the_canonical_json():
    expected = hashlib.sha256('{"a":1,"b":[1,2],"é":"ü"}'.encode()).hexdigest()
    assert payload_key({"b": [1, 2], "é": "ü", "a": 1}) == expected


def test_payload_key_ignores_dict_order_but_not_values_or_types():
    assert payload_key({"a": 1, "b": {"y": 2, "x": 1}}) == payload_key({"b": {"x": 1, "y": 2},
                                                                         "a": 1})
    keys = {payload_key(value) for value in ({"a": 1}, {"a": 2}, {"a": "1"}, {"a": 1.5},
                                             [1, 2], [2, 1], None, "", 0, True)}
    assert len(keys) == 10
    assert all(len(key) == 64 for key in keys)


@pytest.mark.parametrize("bad", [{1, 2}, object(), float("nan"), {"a": b"bytes"}])
def test_payload_key_of_a_non_json_payload_is_a_clear_payload_error(bad):
    with pytest.raises(InvalidTaskPayload, match="not JSON-serialisable"):
        payload_key(bad)


def test_payload_key_as_a_task_key_names_the_task_on_a_bad_payload():
    task = make_task(unique=True, unique_for=10, unique_key=payload_key)
    with pytest.raises(InvalidTaskPayload, match="shop.tasks.t") as error:
        lock_spec(task, {"when": object()}, "default", "p")
    assert error.value.task_name == "shop.tasks.t"


# -- key derivation -------------------------------------------------------------------------


def test_the_lock_key_holds_prefix_queue_task_and_key():
    task = make_task(unique=True, unique_for=90, unique_key=lambda p: f"order-{p['order']}",
                     unique_mode="until_executed")

    spec = lock_spec(task, {"order": 123}, "emails", "shop")

    assert spec == LockSpec("shop:{emails}:unique:shop.tasks.t:order-123", 90_000,
                            "until_executed")


def test_a_task_that_is_not_unique_takes_no_lock_unless_a_call_overrides():
    task = make_task()
    assert lock_spec(task, {}, "default", "p") is None

    spec = lock_spec(task, {}, "default", "p", unique_key="nightly", unique_for=30)
    assert spec == LockSpec("p:{default}:unique:shop.tasks.t:nightly", 30_000, "until_finished")


def test_overrides_take_a_string_or_a_callable_and_win_over_the_task():
    task = make_task(unique=True, unique_for=60, unique_key=lambda p: "declared")

    by_string = lock_spec(task, {}, "q", "p", unique_key="given", unique_mode="while_locked",
                          unique_for=2.5)
    by_callable = lock_spec(task, {"id": 7}, "q", "p", unique_key=lambda p: f"id-{p['id']}")

    assert by_string == LockSpec("p:{q}:unique:shop.tasks.t:given", 2_500, "while_locked")
    assert by_callable.key == "p:{q}:unique:shop.tasks.t:id-7"


@pytest.mark.parametrize("source", [None, lambda p: ""])
def test_an_empty_key_is_one_lock_for_the_task_and_is_warned_about_once(caplog, source):
    name = f"shop.tasks.whole_{id(source)}"
    task = make_task(name=name, unique=True, unique_for=10, unique_key=source)
    caplog.set_level(logging.WARNING, logger="django_taskrunner")

    specs = {lock_spec(task, {"n": n}, "default", "p").key for n in range(3)}

    assert specs == {f"p:{{default}}:unique:{name}"}
    warnings = [rec for rec in caplog.records if name in rec.getMessage()]
    assert len(warnings) == 1
    assert "one lock covers the whole task" in warnings[0].getMessage()


def test_a_key_function_that_raises_is_an_options_error_naming_the_task():
    task = make_task(unique=True, unique_for=10, unique_key=lambda p: p["missing"])
    with pytest.raises(InvalidTaskOptions,
                       match=r"unique_key of task 'shop.tasks.t' raised KeyError") as error:
        derive_key(task, {}, task.options.unique_key)
    assert isinstance(error.value.__cause__, KeyError)


@pytest.mark.parametrize("returned", [123, None, b"bytes", ["a"]])
def test_a_key_function_returning_a_non_string_is_an_options_error(returned):
    task = make_task(unique=True, unique_for=10, unique_key=lambda p: returned)
    with pytest.raises(InvalidTaskOptions, match="shop.tasks.t.*must return a str"):
        lock_spec(task, {}, "default", "p")


def test_a_bad_unique_key_override_is_refused():
    with pytest.raises(InvalidTaskOptions, match="string or a callable"):
        lock_spec(make_task(), {}, "default", "p", unique_key=42, unique_for=10)


def test_unique_without_unique_for_is_refused_at_dispatch():
    # unique_mode alone makes the call unique, and the task declares no unique_for
    with pytest.raises(UniqueForRequired, match="shop.tasks.t.*unique_for"):
        lock_spec(make_task(), {}, "default", "p", unique_mode="until_executed")


@pytest.mark.parametrize("unique_for", [0.5, 7 * 24 * 3600 + 1, "60", True])
def test_unique_for_out_of_range_is_refused_at_dispatch(unique_for):
    with pytest.raises(InvalidTaskOptions, match="unique_for"):
        lock_spec(make_task(), {}, "default", "p", unique_key="k", unique_for=unique_for)


def test_a_bad_mode_is_refused_naming_the_task_and_the_modes():
    task = make_task(unique=True, unique_for=10)
    with pytest.raises(InvalidTaskOptions, match="shop.tasks.t.*until_finished.*'forever'"):
        lock_spec(task, {}, "default", "p", unique_mode="forever")


def test_dispatch_refuses_bad_unique_options_before_touching_redis(r):
    task = make_task(unique=True, unique_for=10, unique_key=lambda p: 1 / 0)
    with pytest.raises(InvalidTaskOptions, match="ZeroDivisionError"):
        dispatch(task, {})
    with pytest.raises(InvalidTaskOptions, match="unique_mode"):
        dispatch(make_task(), {}, unique_key="k", unique_for=5, unique_mode="sometimes")


# -- the script call ------------------------------------------------------------------------


def test_the_script_gets_only_the_keys_the_claim_holds():
    lock = LockSpec("p:{q}:unique:t:k", 5_000, "until_finished")
    lock_only = UniqueClaim("t", "m1", lock, None)
    id_only = UniqueClaim("t", "job-1", None, "p:{q}:id:job-1")

    assert lock_only.script_call("p:{q}:stream", "{}", None) == (
        ["p:{q}:stream", "p:{q}:unique:t:k"],
        ["stream", "{}", "0", "m1", "5000", "", "", ""],
    )
    call_keys, args = id_only.script_call("p:{q}:delayed", "{}", 10**13)
    assert call_keys == ["p:{q}:delayed", "p:{q}:id:job-1"]
    assert args[:5] == ["delayed", "{}", str(10**13), "", ""]
    assert args[5] == "job-1"


def test_a_script_reply_becomes_the_stream_id_or_the_right_error():
    claim = UniqueClaim("t", "job-1", LockSpec("L", 1000, "until_finished"), "I")

    assert claim.read_reply([b"ok", b"1-0"]) == "1-0"
    with pytest.raises(TaskAlreadyDispatched) as held:
        claim.read_reply([b"lock", b"other-id"])
    assert (held.value.holder_id, held.value.lock_key) == ("other-id", "L")
    with pytest.raises(TaskIdConflict) as taken:
        claim.read_reply([b"id", b"job-1"])
    assert (taken.value.holder_id, taken.value.id_key) == ("job-1", "I")
