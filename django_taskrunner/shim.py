"""The name of the shim task that runs Django Tasks framework tasks, and the name its
runs are shown under (`shown_name`): a module of constants the worker, the admin and the
backend share without importing the backend or the framework."""

from __future__ import annotations

import re
import sys
from typing import Any

SHIM_TASK = "django_taskrunner.run_django_task"
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
