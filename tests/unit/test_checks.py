"""System checks reject bad TASKRUNNER values with clear messages."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_taskrunner import conf
from django_taskrunner.checks import check_taskrunner_settings
from django_taskrunner.conf import (
    DEFAULTS,
    get_settings,
    validate_settings,
)


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
    # Our checks are tagged compatibility; Django 6's other checks would open the database,
    # which a unit test has no access to.
    with pytest.raises(SystemCheckError, match="taskrunner.E002"):
        call_command("check", "--tag", "compatibility")


# A value no key accepts: not a number, a string, a path, a list, a dict or a bool.
UNUSABLE = object()


def test_every_key_of_defaults_has_its_own_check():
    """A new setting cannot slip through: each key refuses a value of the wrong type, in
    the system checks and in the run-time reader, with a message naming the key."""
    assert set(getattr(conf, "KEY_CHECKS", {})) == set(DEFAULTS)
    for key in DEFAULTS:
        found = validate_settings({key: UNUSABLE})
        assert any(key in error.msg for error in found), (key, found)


def test_the_defaults_pass_their_own_checks():
    assert validate_settings({key: option.default for key, option in DEFAULTS.items()}) == []


@pytest.mark.parametrize("key", sorted(DEFAULTS))
def test_the_run_time_reader_refuses_a_bad_value_of_every_key(settings, key):
    settings.TASKRUNNER = {key: UNUSABLE}
    with pytest.raises(ImproperlyConfigured, match=f"TASKRUNNER\\['{key}'\\]"):
        get_settings()


def test_embedded_dir_must_be_a_folder_path(settings, tmp_path):
    for bad in (5, "", bytes(tmp_path), [str(tmp_path)], f"{tmp_path}\0b"):
        [error] = validate_settings({"EMBEDDED_DIR": bad})
        assert error.id == "taskrunner.E005" and "EMBEDDED_DIR" in error.msg
    assert ids({"EMBEDDED_DIR": 5}, settings) == [
        ("taskrunner.E005", "TASKRUNNER['EMBEDDED_DIR'] must be None or a folder path "
                            "(a non-empty str or pathlib.Path), not 5")]
    with pytest.raises(ImproperlyConfigured, match="EMBEDDED_DIR"):
        get_settings()
    for good in (None, str(tmp_path), tmp_path):
        assert validate_settings({"EMBEDDED_DIR": good}) == []


NUMERIC_KEYS = [
    "RESERVATION_TIMEOUT", "BATCH_SIZE", "BLOCK_MS", "MIN_WORKERS", "MAX_WORKERS",
    "DESIRED_WAIT", "DESIRED_WAIT_TOLERANCE", "TUNING_COOLDOWN", "STATS_INTERVAL",
    "STATS_WINDOW", "SHUTDOWN_TIMEOUT", "LONG_QUEUE_THRESHOLD", "LONG_QUEUE_COOLDOWN",
    "SOCKET_TIMEOUT", "CONNECT_TIMEOUT", "LEADER_LEASE", "TIME_LIMIT_GRACE",
    "DEAD_CONSUMER_TIMEOUT", "RESULT_TTL", "ASYNC_CONCURRENCY", "OUTBOX_WARN_AGE",
    "FINISHED_LIST_SIZE", "QUEUE_FORGET_AFTER", "PREFETCH_MS", "MAX_TASKS_PER_CHILD",
    "MAX_MEMORY_PER_CHILD", "WORKER_LOST_AFTER",
]


def test_the_numeric_keys_are_these():
    assert sorted(getattr(conf, "NUMBERS", {})) == sorted(NUMERIC_KEYS)


@pytest.mark.parametrize("key", NUMERIC_KEYS)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_are_refused(settings, key, value):
    [error] = validate_settings({key: value})
    assert error.id == "taskrunner.E002" and key in error.msg, error.msg
    settings.TASKRUNNER = {key: value}
    with pytest.raises(ImproperlyConfigured, match=key):
        get_settings()


@pytest.mark.parametrize("value", [
    {"LEADER_LEASE": 1e300}, {"RESERVATION_TIMEOUT": 10**30}, {"STATS_INTERVAL": 1e12},
    {"MAX_WORKERS": 10**6}, {"BATCH_SIZE": 10**9}, {"SOCKET_TIMEOUT": 1e20},
    {"FINISHED_LIST_SIZE": 10**7}, {"FINISHED_LIST_SIZE": -1}, {"FINISHED_LIST_SIZE": 1.5},
    {"QUEUE_FORGET_AFTER": -1}, {"QUEUE_FORGET_AFTER": 1e12}, {"QUEUE_FORGET_AFTER": "1d"},
    {"PREFETCH_MS": -1}, {"PREFETCH_MS": 60_001}, {"PREFETCH_MS": 2.5},
])
def test_numbers_out_of_range_or_of_the_wrong_type_are_refused(value):
    [(key, number)] = value.items()
    [error] = validate_settings(value)
    assert error.id == "taskrunner.E002" and key in error.msg and "from" in error.msg


def test_a_non_dict_taskrunner_is_refused_at_first_use(settings):
    settings.TASKRUNNER = "redis://:secret@127.0.0.1:6421/0"
    with pytest.raises(ImproperlyConfigured, match="TASKRUNNER must be a dict, not str") as info:
        get_settings()
    assert "secret" not in str(info.value)


def test_the_run_time_reader_checks_the_connection_alias(settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    for alias in ("", "nope", "default"):
        settings.TASKRUNNER = {"CONNECTION": alias}
        with pytest.raises(ImproperlyConfigured, match="taskrunner.E007"):
            get_settings()


SCRIPT = """
import django
from django.conf import settings

settings.configure(
    BASE_DIR={base_dir!r}, SECRET_KEY="x", USE_TZ=True,
    INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django_taskrunner"],
    DATABASES={{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}}},
    TASKRUNNER="redis://127.0.0.1:6421/0",
)
django.setup()

from django_taskrunner import task


@task
def noop(payload):
    pass


noop.dispatch({{"n": 1}})
print("dispatched")
"""


def test_a_process_without_system_checks_fails_loudly_on_a_non_dict_taskrunner(tmp_path):
    """gunicorn or a script calling django.setup() runs no checks: the first dispatch must
    raise, not start an embedded Redis and queue into it."""
    script = tmp_path / "script.py"
    script.write_text(SCRIPT.format(base_dir=str(tmp_path)))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    try:
        done = subprocess.run(  # noqa: S603 - our own interpreter and script
            [sys.executable, str(script)], capture_output=True, text=True,
            env=env, timeout=60, cwd=tmp_path)
    finally:
        _stop_embedded_redis(tmp_path / ".taskrunner")
    assert done.returncode != 0 and "dispatched" not in done.stdout, done
    assert "ImproperlyConfigured: bad TASKRUNNER setting: TASKRUNNER must be a dict, not str" in (
        done.stderr), done.stderr
    assert not (tmp_path / ".taskrunner").exists()


def _stop_embedded_redis(data_dir: Path) -> None:
    """Shut down an embedded Redis the script may have started (the code before the fix)."""
    from django_taskrunner.store import embedded

    if data_dir.exists():
        embedded.stop_server(data_dir)


@pytest.mark.parametrize(("key", "value"), [("ASYNC_CONCURRENCY", 0), ("ASYNC_CONCURRENCY", 2.0),
                                            ("ASYNC_CONCURRENCY", 10_001), ("EAGER", 1),
                                            ("EAGER", "yes")])
def test_the_async_and_eager_settings_refuse_bad_values(key, value):
    [error] = validate_settings({key: value})
    assert key in error.msg and error.id in ("taskrunner.E002", "taskrunner.E005"), error.msg
    assert validate_settings({"ASYNC_CONCURRENCY": 1, "EAGER": True}) == []


def test_processes_accepts_auto_or_a_count_and_refuses_the_rest():
    for good in ("auto", 1, 4, 1024):
        assert validate_settings({"PROCESSES": good}) == []
    for bad in (0, -1, 1025, "4", "AUTO", 2.0, True, None):
        [error] = validate_settings({"PROCESSES": bad})
        assert error.id == "taskrunner.E002" and "PROCESSES" in error.msg
