"""System checks reject bad TASKRUNNER values with clear messages."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_taskrunner.checks import check_taskrunner_settings
from django_taskrunner.conf import DEFAULTS, get_settings


def ids(settings_value, settings):
    settings.TASKRUNNER = settings_value
    return [(error.id, error.msg) for error in check_taskrunner_settings()]


def test_good_settings_pass(settings, redis_url):
    assert ids({"REDIS_URL": redis_url, "BATCH_SIZE": 50}, settings) == []


@pytest.mark.parametrize("value, expected_id, words", [
    ({"BATCH_SIZE": -1}, "taskrunner.E002", "BATCH_SIZE"),
    ({"BATCH_SIZE": "10"}, "taskrunner.E002", "integer"),
    ({"MAX_WORKERS": 0}, "taskrunner.E002", "MAX_WORKERS"),
    ({"MAX_WORKER": 4}, "taskrunner.E001", 'unknown key "MAX_WORKER"'),
    ({"MIN_WORKERS": 9, "MAX_WORKERS": 4}, "taskrunner.E003", "MIN_WORKERS"),
    ({"PREFIX": "a:b"}, "taskrunner.E004", "PREFIX"),
    ({"DEFAULT_QUEUE": "{x}"}, "taskrunner.E004", "DEFAULT_QUEUE"),
    ({"REDIS_URL": "http://x"}, "taskrunner.E005", "redis://"),
    ({"REDIS_URL": "redis://x", "CONNECTION": "default"}, "taskrunner.E006", "not both"),
    ({"CONNECTION": "nope"}, "taskrunner.E007", "not in CACHES"),
    ({"CONNECTION": "locmem"}, "taskrunner.E007", "not a django-redis cache"),
    ({"FAILED_TASK_HANDLER": "no.such.module.fn"}, "taskrunner.E008", "cannot be imported"),
    ({"BLOCK_MS": 20_000}, "taskrunner.E009", "SOCKET_TIMEOUT"),
    ("not a dict", "taskrunner.E000", "dict"),
])
def test_bad_values_fail_the_checks(settings, value, expected_id, words):
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "locmem": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    }
    found = ids(value, settings)
    assert any(error_id == expected_id and words in msg for error_id, msg in found), found


def test_the_unknown_key_error_suggests_the_close_key(settings):
    settings.TASKRUNNER = {"BATCH_SIZ": 3}
    [error] = check_taskrunner_settings()
    assert 'did you mean "BATCH_SIZE"' in error.hint


def test_get_settings_refuses_bad_values_too(settings):
    settings.TASKRUNNER = {"BATCH_SIZE": 0}
    with pytest.raises(ImproperlyConfigured, match="BATCH_SIZE"):
        get_settings()


def test_defaults_apply_to_keys_not_given(settings, redis_url):
    settings.TASKRUNNER = {"REDIS_URL": redis_url}
    values = get_settings()
    for key, option in DEFAULTS.items():
        if key not in ("REDIS_URL", "EMBEDDED_DIR"):
            assert getattr(values, key) == option.default


def test_the_checks_run_through_manage_py_check(settings):
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    settings.TASKRUNNER = {"BATCH_SIZE": -3}
    with pytest.raises(SystemCheckError, match="taskrunner.E002"):
        call_command("check")
