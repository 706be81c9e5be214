"""What the worker tells the project about each attempt: the `django_taskrunner.tasks` log
line, the signals (django_taskrunner/signals.py), the OpenTelemetry span and the figures.

`count_run` is the step that counts an attempt's run time and outcome (the monitor writes
them in batches, `stats/`). `announce_start` is a step (the last before the run);
`finished` is called by the outcome steps once they settled the delivery. With no
receiver connected, no tracing and the task lines off, each costs a few attribute checks.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from django.dispatch import Signal

from django_taskrunner import signals, tracing
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.shim import shown_name
from django_taskrunner.worker.steps.run import Run

if TYPE_CHECKING:
    from django_taskrunner.worker.executor import Executor

logger = logging.getLogger(__name__)
# One INFO line per finished attempt; `runtasks -v 2` turns it on (docs/logging.md).
task_logger = logging.getLogger("django_taskrunner.tasks")

SUCCEEDED, RETRIED, FAILED = "succeeded", "retried", "failed"
OUTCOME_SIGNALS = {SUCCEEDED: signals.task_succeeded, RETRIED: signals.task_retried,
                   FAILED: signals.task_failed}
# The spans of the attempts running now, by id() of their message: the watchdog settles
# a stuck attempt with a Run of its own, but the same message object.
_spans: dict[int, tracing.ConsumerSpan] = {}


def log_fields(message: TaskMessage) -> dict[str, Any]:
    """`extra` of a log line about `message`: attributes of the record that a handler
    (Sentry's logging integration, a JSON formatter) can read; a framework task's own
    path, not the shim's."""
    return {"task_name": shown_name(message.task_name, message.payload), "task_id": message.id,
            "queue": message.queue}


def announce_start(executor: Executor, run: Run) -> bool:
    """Start the attempt's span and send `task_started`."""
    message = run.message
    assert message is not None
    if tracing.ENABLED:
        span = tracing.consumer_span(message)
        if span is not None:
            _spans[id(message)] = span
    if signals.task_started.receivers:
        send(signals.task_started, run.task, message=message)
    return True


def finished(run: Run, outcome: str, **details: Any) -> None:
    """Log, signal and end the span of an attempt whose outcome is settled."""
    message, error = run.message, run.error
    assert message is not None
    if _spans:
        span = _spans.pop(id(message), None)
        if span is not None:
            span.end(outcome, error)
    signal = OUTCOME_SIGNALS[outcome]
    log = task_logger.isEnabledFor(logging.INFO)
    if not (log or signal.receivers):
        return
    duration = run.attempt.elapsed() if run.attempt is not None else 0.0
    if log:
        task_logger.info(
            "task=%s id=%s queue=%s attempt=%d duration=%.3fs outcome=%s%s",
            run.shown_name, message.id, message.queue, message.attempt, duration, outcome,
            f" error={type(error).__name__}" if error is not None else "",
            extra={**log_fields(message), "outcome": outcome, "duration": duration})
    if signal.receivers:
        if error is not None:
            details["error"] = error
        send(signal, run.task, message=message, duration=duration, **details)


def send(signal: Signal, sender: Any, **kwargs: Any) -> None:
    """Send to every receiver; one that raises is logged, never raised into the worker."""
    message: TaskMessage = kwargs["message"]
    for receiver, response in signal.send_robust(sender, **kwargs):
        if isinstance(response, Exception):
            logger.error("signal receiver %s raised for task=%s id=%s queue=%s",
                         getattr(receiver, "__qualname__", receiver),
                         shown_name(message.task_name, message.payload),
                         message.id, message.queue, exc_info=response,
                         extra=log_fields(message))


def count_run(executor: Executor, run: Run) -> bool:
    """Record how long the attempt ran and whether it failed (after the time limit step)."""
    assert run.message is not None and run.task is not None and run.attempt is not None
    executor.stats.ran(run.message.queue, run.shown_name, run.attempt.elapsed(), run.error)
    return True
