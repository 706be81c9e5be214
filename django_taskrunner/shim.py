"""The name of the shim task that runs Django Tasks framework tasks, and the name its
runs are shown under (`shown_name`): a module of constants the worker, the admin and the
backend share without importing the backend or the framework."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable
from typing import Any

SHIM_TASK = "django_taskrunner.run_django_task"
# The framework's own loggers (Django 6, the backport): a "Task id=... state=..." line
# as each task starts and finishes.
FRAMEWORK_LOGGERS = ("django.tasks", "django_tasks")
TASK_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")


def shown_name(task_name: str, payload: Any) -> str:
    """The name stats, metrics and failed rows give a message: its task's, except for the
    shim, which shows the framework function it runs (`payload["func"]`).

    Only a path naming a framework task in a module already imported is shown, without
    importing anything: a forged or refused path keeps the shim's name.
    """
    if task_name != SHIM_TASK or not isinstance(payload, dict):
        return task_name
    path = payload.get("func")
    if not isinstance(path, str) or not TASK_PATH.fullmatch(path):
        return task_name
    module_name, _, attribute = path.rpartition(".")
    module = sys.modules.get(module_name)
    if module is None:
        return task_name
    from django_taskrunner.compat import Task

    return path if isinstance(getattr(module, attribute, None), Task) else task_name


def framework_result_ttl(task_name: str, payload: Any, default: int | None) -> int | None:
    """Seconds the finished record of a shim run is kept: the `RESULT_TTL` option of the
    backend that enqueued it (carried in the payload), else `default`."""
    if task_name != SHIM_TASK or not isinstance(payload, dict):
        return default
    ttl = payload.get("result_ttl")
    if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 1:
        return default
    return ttl


class _NoTraceback(logging.Filter):
    """Drops the traceback from the framework's FAILED line: the worker's own "task
    failed for good" line carries it, naming the same function, so it prints once."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info, record.exc_text = None, None
        return True


def quiet_framework_logs(verbosity: int) -> Callable[[], None]:
    """Set the framework's loggers for a `runtasks` run; returns what puts them back.

    Their per-task INFO lines show at `-v 2` and more, or when LOGGING gives them a
    level, like the worker's own per-task lines; a failure's traceback comes once, in
    the worker's line.
    """
    undo: list[Callable[[], None]] = []
    for name in FRAMEWORK_LOGGERS:
        framework_logger = logging.getLogger(name)
        if verbosity < 2 and framework_logger.level == logging.NOTSET:
            framework_logger.setLevel(logging.WARNING)
            undo.append(lambda lg=framework_logger: lg.setLevel(logging.NOTSET))
        no_traceback = _NoTraceback()
        framework_logger.addFilter(no_traceback)
        undo.append(lambda lg=framework_logger, f=no_traceback: lg.removeFilter(f))

    def restore() -> None:
        for step in undo:
            step()

    return restore
