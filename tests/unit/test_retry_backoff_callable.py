"""A `retry_backoff` callable's answer is a due time only when it is a finite number."""

from __future__ import annotations

import math

import pytest

from django_taskrunner import Task
from django_taskrunner.conf import MAX_SECONDS
from django_taskrunner.core.task import TaskOptions
from django_taskrunner.worker.steps import retry_delay


def with_backoff(backoff) -> Task:
    return Task(fn=lambda payload: None, name="t", options=TaskOptions(retry_backoff=backoff))


@pytest.mark.parametrize("answer", [math.nan, math.inf, -math.inf])
def test_a_non_finite_answer_uses_the_default_backoff(answer, caplog):
    delay = retry_delay(with_backoff(lambda retry: answer), 1)
    assert math.isfinite(delay) and 0.5 <= delay <= 1  # the default for the first retry
    assert "returned" in caplog.text


def test_a_finite_answer_is_kept_within_zero_and_a_year():
    assert retry_delay(with_backoff(lambda retry: 2.5), 1) == 2.5
    assert retry_delay(with_backoff(lambda retry: -3), 1) == 0
    assert retry_delay(with_backoff(lambda retry: 1e300), 1) == MAX_SECONDS
