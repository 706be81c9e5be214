"""Django signals and tasks: the signals the worker sends around each task it runs, for
projects that hook in, and `dispatch_on` (below), which dispatches a task whenever a
signal fires.

Each is sent with the task (`sender`, a `Task`: connect with `sender=my_task` to hear one
task only) and `message` (its `TaskMessage`: id, payload, queue, attempt):

- `task_started`: an attempt is about to run;
- `task_succeeded`: it returned; `duration` (seconds);
- `task_retried`: it raised and goes back for another attempt; `duration`, `error` and
  `delay` (seconds until the next attempt);
- `task_failed`: its last attempt raised (or ran past its time limit) and it was recorded
  as failed for good; `duration`, `error`.

Receivers run in the worker thread that ran the task, after the outcome was settled
(acked, requeued or recorded). One that raises is logged and changes nothing. With no
receiver connected a send costs one list check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.dispatch import Signal

from django_taskrunner.core.dispatch import dispatch, dispatch_on_commit, resolve_task
from django_taskrunner.core.task import Task

task_started = Signal()
task_succeeded = Signal()
task_retried = Signal()
task_failed = Signal()

__all__ = ["task_failed", "task_retried", "task_started", "task_succeeded"]


# `dispatch_on`: dispatch a task whenever a Django signal fires.

def dispatch_on(
    signal: Signal, task: str | Task, *, sender: Any = None,
    payload: Callable[..., Any] | None = None, when: Callable[..., bool] | None = None,
    on_commit: bool = True, **dispatch_options: Any,
) -> Callable[..., None]:
    """Connect `signal` to a receiver that dispatches `task`.

    `payload` and `when` are called with the signal's arguments (`sender=`, `instance=`,
    `created=`, ...); `when` returning False skips the dispatch. With `on_commit`
    (default) the dispatch waits for the current transaction to commit, so the worker
    never reads a row that is not yet visible; it goes through the transactional outbox
    (`TASKRUNNER["OUTBOX"]`, docs/outbox.md), so a commit guarantees the task is queued.
    Returns the receiver; `receiver.disconnect()` disconnects it.

    Example:
        dispatch_on(post_save, send_receipt, sender=Order,
                    payload=lambda instance, **kw: {"order": instance.pk},
                    when=lambda created, **kw: created)
    """
    _check(signal, payload, when)
    resolved = resolve_task(task) if isinstance(task, Task) else task
    send = dispatch_on_commit if on_commit else dispatch

    def receiver(sender: Any, **kwargs: Any) -> None:
        kwargs.pop("signal", None)
        if when is not None and not when(sender=sender, **kwargs):
            return
        value = payload(sender=sender, **kwargs) if payload is not None else None
        send(resolved, value, **dispatch_options)

    name = resolved.name if isinstance(resolved, Task) else resolved
    return _connect(signal, receiver, sender, f"django_taskrunner:{name}:{id(signal)}:{id(sender)}")


def _check(signal: Any, payload: Any, when: Any) -> None:
    if not isinstance(signal, Signal):
        raise TypeError(f"dispatch_on needs a django.dispatch.Signal, not {signal!r}")
    if payload is not None and not callable(payload):
        raise TypeError("payload must be a callable taking the signal's arguments")
    if when is not None and not callable(when):
        raise TypeError("when must be a callable taking the signal's arguments")


def _connect(signal: Signal, receiver: Callable[..., None], sender: Any,
             uid: str) -> Callable[..., None]:
    """Connect `receiver` under `uid`, and give it its `disconnect()`."""
    signal.connect(receiver, sender=sender, weak=False, dispatch_uid=uid)
    # Connected under a dispatch_uid, which `signal.disconnect(receiver)` does not find.
    receiver.dispatch_uid = uid  # type: ignore[attr-defined]
    receiver.disconnect = (  # type: ignore[attr-defined]
        lambda: signal.disconnect(sender=sender, dispatch_uid=uid))
    return receiver
