"""Rate and concurrency limit options are checked when declared: each bad value is an
`InvalidTaskOptions` naming the task and the value; a key function is checked when run."""

from __future__ import annotations

import pytest

from django_taskrunner import InvalidTaskOptions, Task
from django_taskrunner.core.options import (
    LimitKeyError,
    Rate,
    TaskOptions,
    limit_key_value,
    parse_rate,
)
from django_taskrunner.store import keys


def declare(**options) -> Task:
    return Task(fn=lambda payload: None, name="shop.sync", options=TaskOptions(**options))


@pytest.mark.parametrize(("text", "rate"), [
    ("5/s", Rate(5, 1_000)), ("100/m", Rate(100, 60_000)), ("1/h", Rate(1, 3_600_000)),
    (" 7 / m ", Rate(7, 60_000)),
])
def test_rates_parse_into_starts_per_window(text, rate):
    assert parse_rate(text) == rate
    assert declare(rate_limit=text).options.rate_limit == text


@pytest.mark.parametrize("bad", [
    "5", "5/d", "0/s", "-1/s", "1.5/s", "five/s", "/s", "5/sec", "", "5/s/m", 5, ["5/s"],
    "1000001/s", True,
])
def test_a_malformed_rate_names_the_task_and_the_value(bad):
    with pytest.raises(InvalidTaskOptions) as raised:
        declare(rate_limit=bad)
    assert "shop.sync" in str(raised.value) and repr(bad) in str(raised.value)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True, False, 100_001])
def test_a_concurrency_limit_is_a_positive_integer(bad):
    with pytest.raises(InvalidTaskOptions) as raised:
        declare(concurrency_limit=bad)
    assert "shop.sync" in str(raised.value) and repr(bad) in str(raised.value)


def test_key_functions_must_be_callable():
    with pytest.raises(InvalidTaskOptions, match="rate_key of task 'shop.sync'.*'account'"):
        declare(rate_limit="5/s", rate_key="account")
    with pytest.raises(InvalidTaskOptions, match="concurrency_key of task 'shop.sync'.*3"):
        declare(concurrency_limit=2, concurrency_key=3)


def test_a_key_function_needs_its_limit():
    with pytest.raises(InvalidTaskOptions, match="rate_key .* needs a rate_limit"):
        declare(rate_key=str)
    with pytest.raises(InvalidTaskOptions, match="concurrency_key .* needs a concurrency_limit"):
        declare(concurrency_key=str)


def test_both_limits_with_keys_are_accepted():
    options = declare(rate_limit="10/m", rate_key=str, concurrency_limit=3,
                      concurrency_key=str).options
    assert (options.rate_limit, options.concurrency_limit) == ("10/m", 3)


def test_a_key_function_that_raises_or_returns_no_string_is_a_limit_key_error():
    assert limit_key_value("rate_key", "t", None, {"a": 1}) == ""
    assert limit_key_value("rate_key", "t", lambda p: p["a"], {"a": "x"}) == "x"
    with pytest.raises(LimitKeyError, match="rate_key of task 't' raised KeyError"):
        limit_key_value("rate_key", "t", lambda p: p["b"], {"a": 1})
    with pytest.raises(LimitKeyError, match="concurrency_key of task 't' must return a str, "
                                            "returned 7"):
        limit_key_value("concurrency_key", "t", lambda p: 7, {})


def test_limit_keys_share_the_queue_slot_and_name_their_waiting_set():
    key = keys.limit_key("p", "emails", "rate", "shop.sync", "acct:1")
    assert key == "p:{emails}:limit:rate:shop.sync:acct:1"
    assert keys.waiting_of("p", key) == "p:{emails}:limit-waiting:rate:shop.sync:acct:1"
    assert keys.limit_key("p", "emails", "concurrency", "t", "") == "p:{emails}:limit:concurrency:t"
    with pytest.raises(ValueError):
        keys.waiting_of("p", "p:{emails}:stream")
