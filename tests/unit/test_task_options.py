"""`@task` checks its options when declared, so mistakes show at start-up."""

from __future__ import annotations

import math

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_taskrunner import InvalidTaskOptions, Task, UniqueForRequired, register_task, task
from django_taskrunner.core.registry import registry


@pytest.fixture(autouse=True)
def restore_registry():
    saved = dict(registry._registry)
    yield
    registry._registry = saved


def test_bare_decorator_registers_under_module_and_function_name():
    @task
    def greet(payload):
        return f"hi {payload}"

    assert registry.get(f"{__name__}.test_bare_decorator_registers_under_module_and_function_name"
                        ".<locals>.greet") is greet
    assert greet("bob") == "hi bob"  # calling it runs it in-process


def test_decorator_with_options_keeps_them():
    @task(name="custom.name", queue="emails", max_retry=3, retry_backoff=2.5, time_limit=10)
    def send(payload):
        pass

    assert send.name == "custom.name"
    assert send.options.queue == "emails"
    assert send.options.max_retry == 3
    assert send.options.retry_backoff == 2.5


@pytest.mark.parametrize("options", [
    {"max_retry": -1},
    {"max_retry": 1.5},
    {"max_retry": True},
    {"queue": "has:colon"},
    {"queue": "{tag}"},
    {"queue": ""},
    {"retry_backoff": -1},
    {"retry_backoff": "soon"},
    {"time_limit": 0},
    {"expires": -5},
    {"unique_mode": "sometimes"},
    {"unique_key": "not callable"},
    {"unique": True, "unique_for": 0.5},
    {"unique": True, "unique_for": 8 * 24 * 3600},
    {"cron": "* * * * *", "schedule": 60},
])
def test_bad_options_are_refused_when_declared(options):
    with pytest.raises(InvalidTaskOptions):
        task(name="bad.task", **options)(lambda payload: None)
    assert "bad.task" not in registry


def test_unknown_option_is_refused_with_the_known_ones_listed():
    with pytest.raises(InvalidTaskOptions, match="unknown @task option.*max_retries"):
        task(max_retries=3)(lambda payload: None)


def test_unique_without_unique_for_raises_unique_for_required():
    with pytest.raises(UniqueForRequired):
        @task(unique=True)
        def once(payload):
            pass


def test_two_tasks_with_one_name_is_an_error_naming_both_places():
    @task(name="dup.name")
    def first(payload):
        pass

    with pytest.raises(ImproperlyConfigured) as excinfo:
        @task(name="dup.name")
        def second(payload):
            pass

    message = str(excinfo.value)
    assert "first" in message and "second" in message
    assert "test_task_options.py" in message


def test_register_task_accepts_a_task_built_by_hand():
    def handler(payload):
        return payload

    built = Task(fn=handler, name="by.hand")
    assert register_task(built) is built
    assert registry.get("by.hand") is built


def test_registering_the_same_function_again_replaces_it():
    def handler(payload):
        pass

    register_task(Task(fn=handler, name="again"))
    register_task(Task(fn=handler, name="again"))
    assert registry.get("again").fn is handler


SECONDS_OPTIONS = ["reservation_timeout", "time_limit", "expires", "schedule", "retry_backoff"]


@pytest.mark.parametrize("name", SECONDS_OPTIONS)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1e300])
def test_seconds_options_must_be_finite_and_at_most_a_year(name, value):
    """NaN passes `value <= 0` checks; NaN and infinity then break the worker at run time."""
    with pytest.raises(InvalidTaskOptions, match=name):
        task(name="bad.task", **{name: value})(lambda payload: None)
    assert "bad.task" not in registry
    task(name="good.task", **{name: 365 * 24 * 3600})(lambda payload: None)


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_unique_for_must_be_finite(value):
    with pytest.raises(InvalidTaskOptions, match="unique_for"):
        task(name="bad.task", unique=True, unique_for=value)(lambda payload: None)


@pytest.mark.parametrize("overrides", [
    {"expires": math.nan}, {"expires": math.inf}, {"expires": 1e300},
    {"unique_for": math.nan}, {"unique_for": math.inf},
])
def test_dispatch_arguments_in_seconds_must_be_finite(overrides):
    """Refused before anything is sent: no Redis needed to see it."""
    from django_taskrunner import dispatch

    plain = task(name="plain.task")(lambda payload: None)
    with pytest.raises(InvalidTaskOptions, match=next(iter(overrides))):
        dispatch(plain, None, **overrides)


@pytest.mark.parametrize("delay", [math.nan, math.inf, -math.inf])
def test_a_delay_must_be_finite(delay):
    from django_taskrunner import dispatch_delayed

    plain = task(name="plain.task")(lambda payload: None)
    with pytest.raises(InvalidTaskOptions, match="delay"):
        dispatch_delayed(plain, None, delay=delay)
