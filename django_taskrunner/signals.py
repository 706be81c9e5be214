"""Signals the worker sends around each task it runs, for projects that hook in.

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

from django.dispatch import Signal

task_started = Signal()
task_succeeded = Signal()
task_retried = Signal()
task_failed = Signal()

__all__ = ["task_failed", "task_retried", "task_started", "task_succeeded"]
