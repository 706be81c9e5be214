"""System checks of the statistics, autoscaling, long-queue and metrics settings."""

from __future__ import annotations

import pytest

from django_taskrunner.checks import check_taskrunner_settings


def found(settings, value):
    settings.TASKRUNNER = value
    return [(error.id, error.msg) for error in check_taskrunner_settings()]


@pytest.mark.parametrize("value, expected_id, words", [
    ({"DESIRED_WAIT_TOLERANCE": 1.0}, "taskrunner.E003", "never shrinks"),
    ({"DESIRED_WAIT": 0.2, "DESIRED_WAIT_TOLERANCE": 0.3}, "taskrunner.E003", "smaller"),
    ({"DESIRED_WAIT_TOLERANCE": -0.1}, "taskrunner.E002", "DESIRED_WAIT_TOLERANCE"),
    ({"DESIRED_WAIT_TOLERANCE": "0.1"}, "taskrunner.E002", "DESIRED_WAIT_TOLERANCE"),
    ({"DESIRED_WAIT": 0}, "taskrunner.E002", "DESIRED_WAIT"),
    ({"TUNING_COOLDOWN": -1}, "taskrunner.E002", "TUNING_COOLDOWN"),
    ({"STATS_INTERVAL": 0}, "taskrunner.E002", "STATS_INTERVAL"),
    ({"STATS_WINDOW": 0}, "taskrunner.E002", "STATS_WINDOW"),
    ({"STATS_WINDOW": 2.5}, "taskrunner.E002", "integer"),
    ({"LONG_QUEUE_COOLDOWN": 0}, "taskrunner.E002", "LONG_QUEUE_COOLDOWN"),
    ({"METRICS_TOKEN": "short"}, "taskrunner.E005", "16 characters"),
    ({"METRICS_TOKEN": 12345}, "taskrunner.E005", "string or None"),
    ({"LONG_QUEUE_HOOK": "tests.testapp.hooks.nope"}, "taskrunner.E008", "cannot be imported"),
])
def test_bad_values_fail_the_checks(settings, value, expected_id, words):
    errors = found(settings, value)
    assert any(error_id == expected_id and words in msg for error_id, msg in errors), errors


def test_good_values_pass(settings, redis_url):
    assert found(settings, {
        "REDIS_URL": redis_url, "DESIRED_WAIT": 0.2, "DESIRED_WAIT_TOLERANCE": None,
        "TUNING_COOLDOWN": 0, "STATS_INTERVAL": 0.1, "STATS_WINDOW": 50,
        "LONG_QUEUE_HOOK": "tests.testapp.hooks.record_long_queue", "LONG_QUEUE_COOLDOWN": 1,
        "METRICS_TOKEN": "x" * 16, "MIN_WORKERS": 1, "MAX_WORKERS": 16,
    }) == []
