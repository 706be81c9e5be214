"""OpenTelemetry: a producer span at dispatch, a consumer span per attempt, its child,
in one trace across retries; nothing at all without the package."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

trace = pytest.importorskip("opentelemetry.trace")
sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.util._once import Once  # noqa: E402

from django_taskrunner import task, tracing  # noqa: E402
from django_taskrunner.models import FailedTask  # noqa: E402
from django_taskrunner.store import get_store  # noqa: E402
from tests.testapp.tasks import always_fails, blocks_in_c, noop  # noqa: E402
from tests.worker_helpers import (  # noqa: E402
    set_app_clock,  # noqa: E402
    wait_for,
    worker_thread,
)

pytestmark = pytest.mark.django_db(transaction=True)

@task
def makes_a_span(payload: Any) -> None:
    with trace.get_tracer("tests").start_as_current_span("inside the task"):
        pass


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The finished spans of this test: an SDK provider set for the test only."""
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    tracing.forget_provider()
    yield exporter
    provider.shutdown()
    unset_tracer_provider()


def unset_tracer_provider() -> None:
    """No provider set again, so the tests after these run untraced: what the
    reset_trace_globals of opentelemetry-test-utils does (the API has no public way)."""
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    tracing.forget_provider()


def named(exporter: InMemorySpanExporter, name: str) -> list[Any]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


def test_the_run_is_a_child_of_the_dispatch_in_the_request_trace(spans, run_burst):
    with trace.get_tracer("tests").start_as_current_span("request") as request:
        message = noop.dispatch({"n": 1})
    assert message.trace_context is not None
    run_burst()

    [dispatch] = named(spans, "dispatch tests.testapp.tasks.noop")
    [run] = named(spans, "run tests.testapp.tasks.noop")
    assert dispatch.kind == trace.SpanKind.PRODUCER and run.kind == trace.SpanKind.CONSUMER
    assert dispatch.parent.span_id == request.get_span_context().span_id
    assert run.parent.span_id == dispatch.context.span_id
    assert run.context.trace_id == request.get_span_context().trace_id
    assert {key: run.attributes[key] for key in (
        "taskrunner.task.name", "taskrunner.task.id", "taskrunner.queue",
        "taskrunner.attempt", "taskrunner.outcome")} == {
        "taskrunner.task.name": "tests.testapp.tasks.noop", "taskrunner.task.id": message.id,
        "taskrunner.queue": "default", "taskrunner.attempt": 1,
        "taskrunner.outcome": "succeeded"}


def test_every_attempt_of_a_retried_task_is_in_the_dispatch_trace(spans, run_burst):
    message = always_fails.dispatch({"n": 1})
    run_burst()
    [dispatch] = named(spans, "dispatch tests.testapp.tasks.always_fails")
    runs = sorted(named(spans, "run tests.testapp.tasks.always_fails"),
                  key=lambda span: span.attributes["taskrunner.attempt"])
    assert [(s.attributes["taskrunner.attempt"], s.attributes["taskrunner.outcome"])
            for s in runs] == [(1, "retried"), (2, "retried"), (3, "failed")]
    assert all(s.parent.span_id == dispatch.context.span_id for s in runs)
    assert {s.context.trace_id for s in runs} == {dispatch.context.trace_id}
    assert all(s.attributes["taskrunner.task.id"] == message.id for s in runs)
    assert runs[-1].status.status_code == trace.StatusCode.ERROR
    assert runs[-1].events[0].name == "exception"


def test_spans_made_by_the_task_are_children_of_its_run(spans, run_burst):
    makes_a_span.dispatch({})
    run_burst()
    [run] = named(spans, f"run {makes_a_span.name}")
    [inner] = named(spans, "inside the task")
    assert inner.parent.span_id == run.context.span_id


def test_a_message_without_trace_context_runs_in_a_root_span(spans, run_burst):
    message = noop.dispatch({"n": 2})
    message.trace_context = None  # as a message from an untraced producer
    get_store().streams.add("default", message.to_json())
    run_burst()
    runs = named(spans, "run tests.testapp.tasks.noop")
    assert len(runs) == 2 and sum(span.parent is None for span in runs) == 1


def test_an_attempt_the_watchdog_gives_up_on_ends_its_span(spans, taskrunner_settings):
    # A task blocked past its time limit and grace in a call the watchdog cannot interrupt
    taskrunner_settings(TIME_LIMIT_GRACE=0.2)
    stuck = blocks_in_c.dispatch({"n": 1, "seconds": 3})
    with worker_thread(concurrency=1):
        wait_for(lambda: FailedTask.objects.filter(message_id=stuck.id).exists())
        [run] = wait_for(lambda: named(spans, f"run {blocks_in_c.name}"), timeout=2.5)
    assert run.attributes["taskrunner.outcome"] == "failed"
    assert run.status.status_code == trace.StatusCode.ERROR


def test_a_provider_set_while_tasks_run_is_used_within_the_check_interval(monkeypatch):
    # The worker asks for the provider once per PROVIDER_CHECK_S, not for every task: a
    # provider set later is picked up by the next span after that interval.
    now = [1000.0]
    set_app_clock(monkeypatch, monotonic=lambda: now[0])
    tracing.forget_provider()
    message = noop.dispatch({"n": 3})
    assert message.trace_context is None  # no provider: not traced, and "none" is trusted
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    try:
        now[0] += tracing.PROVIDER_CHECK_S * 0.9
        assert tracing.producer_context(message) is None  # still within the interval
        now[0] += tracing.PROVIDER_CHECK_S * 0.2
        assert tracing.producer_context(message) is not None
        span = tracing.consumer_span(message)
        assert span is not None
        span.end("succeeded")
    finally:
        provider.shutdown()
        unset_tracer_provider()


SCRIPT = """
import sys
{block}
import django
django.setup()
from django_taskrunner import TaskMessage, tracing
message = TaskMessage(id="a" * 32, task_name="t", queue="default", payload=None)
print(tracing.ENABLED, tracing.producer_context(message), tracing.consumer_span(message),
      "opentelemetry" in sys.modules and sys.modules["opentelemetry"] is not None)
"""


@pytest.mark.parametrize(("block", "expected"), [
    ('sys.modules["opentelemetry"] = None  # the extra is not installed', "False None None False"),
    ("", "True None None"),  # the API without an SDK provider: no span, nothing carried
])
def test_without_the_package_or_an_sdk_nothing_is_traced(block, expected):
    result = subprocess.run(  # noqa: S603 - our own script
        [sys.executable, "-c", SCRIPT.format(block=block)], capture_output=True, text=True,
        timeout=60, env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(expected), result.stdout
