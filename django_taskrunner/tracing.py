"""OpenTelemetry spans, when the `otel` extra (`opentelemetry-api`) is installed.

A dispatch starts (and ends) a PRODUCER span and carries its W3C `traceparent` in the
message (wire field `tc`); the worker runs each attempt inside a CONSUMER span whose
parent is that context, so the run joins the trace of the request that dispatched it.
A retry carries the same context on: every attempt is a child of the dispatch's span.

The import is tried once, here. Without the package `ENABLED` is False and every function
returns at once: nothing is imported and a task pays one attribute check. With the API
but no SDK tracer provider set, no span is started and nothing is carried.
"""

from __future__ import annotations

import threading
from typing import Any

from django_taskrunner.core import clock

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the extra is not installed: every function below is a no-op
    trace = None  # type: ignore[assignment]
    otel_context = None  # type: ignore[assignment]
    TraceContextTextMapPropagator = None  # type: ignore[assignment,misc]

ENABLED = trace is not None
TRACER_NAME = "django_taskrunner"
_propagator = TraceContextTextMapPropagator() if ENABLED else None
_NO_PROVIDER = (trace.ProxyTracerProvider, trace.NoOpTracerProvider) if ENABLED else ()


# How long the answer "no SDK provider" is trusted before asking OpenTelemetry again.
PROVIDER_CHECK_S = 1.0
_no_provider_until = 0.0


def _tracer() -> Any:
    """Our tracer, or None while no SDK provider is set (the API alone records nothing,
    so a task then pays no span). A project may set its provider after this module
    loads, so "none" is asked again after `PROVIDER_CHECK_S`; asking costs about 1 us,
    most of a no-op task's tracing cost when asked for every task."""
    global _no_provider_until
    if _no_provider_until and clock.monotonic() < _no_provider_until:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, _NO_PROVIDER):
        _no_provider_until = clock.monotonic() + PROVIDER_CHECK_S
        return None
    _no_provider_until = 0.0
    return provider.get_tracer(TRACER_NAME)


def forget_provider() -> None:
    """Ask OpenTelemetry for the provider again at the next span, instead of up to
    `PROVIDER_CHECK_S` later: for code that sets a provider while tasks run (tests)."""
    global _no_provider_until
    _no_provider_until = 0.0


def _attributes(message: Any) -> dict[str, Any]:
    return {
        "messaging.system": "redis",
        "messaging.destination.name": message.queue,
        "messaging.message.id": message.id,
        "taskrunner.task.name": message.task_name,
        "taskrunner.task.id": message.id,
        "taskrunner.queue": message.queue,
        "taskrunner.attempt": message.attempt,
    }


def producer_context(message: Any) -> str | None:
    """Record the dispatch of `message` as a PRODUCER span (a child of the current span);
    its `traceparent`, to carry in the message, or None when nothing is traced."""
    tracer = _tracer() if ENABLED else None
    if tracer is None:
        return None
    span = tracer.start_span(f"dispatch {message.task_name}", kind=trace.SpanKind.PRODUCER,
                             attributes=_attributes(message))
    span.end()
    carrier: dict[str, str] = {}
    _propagator.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent")


class ConsumerSpan:
    """The span of one attempt, current (attached) in the thread running it until `end`."""

    __slots__ = ("span", "thread", "token")

    def __init__(self, span: Any, token: Any) -> None:
        self.span = span
        self.token = token
        self.thread = threading.get_ident()

    def end(self, outcome: str, error: BaseException | None = None) -> None:
        """Close the span with the attempt's outcome; detach it from this thread."""
        self.span.set_attribute("taskrunner.outcome", outcome)
        if error is not None:
            self.span.record_exception(error)
            self.span.set_status(trace.Status(trace.StatusCode.ERROR, type(error).__name__))
        self.span.end()
        if threading.get_ident() == self.thread:  # not the watchdog's thread
            otel_context.detach(self.token)


def consumer_span(message: Any) -> ConsumerSpan | None:
    """Start the CONSUMER span of an attempt of `message`, the child of the context the
    message carries (a root span without one), and make it current in this thread."""
    tracer = _tracer() if ENABLED else None
    if tracer is None:
        return None
    tc = getattr(message, "trace_context", None)
    parent = (_propagator.extract({"traceparent": tc}) if tc
              else otel_context.Context())
    span = tracer.start_span(f"run {message.task_name}", context=parent,
                             kind=trace.SpanKind.CONSUMER, attributes=_attributes(message))
    token = otel_context.attach(trace.set_span_in_context(span, parent))
    return ConsumerSpan(span, token)
