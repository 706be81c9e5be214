"""The task registry: task name -> `Task`.

It exposes `_registry` because Django's `autodiscover_modules(register_to=...)`
restores that attribute when an app's `tasks.py` fails to import, so a retried import
does not trip the duplicate-name error.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Iterator
from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured

from django_taskrunner.exceptions import TaskNotFound

if TYPE_CHECKING:
    from django_taskrunner.core.task import Task


def _origin(task: Task) -> str:
    fn = task.fn
    try:
        where = f"{inspect.getsourcefile(fn)}:{fn.__code__.co_firstlineno}"
    except (TypeError, AttributeError):
        where = "<unknown file>"
    return f"{fn.__module__}.{fn.__qualname__} ({where})"


class TaskRegistry:
    """Holds every declared task, keyed by name."""

    def __init__(self) -> None:
        self._registry: dict[str, Task] = {}

    def register(self, task: Task) -> Task:
        """Add `task`; another task already under its name is a start-up error.

        Registering the same function again (a re-imported module) replaces the entry.
        """
        existing = self._registry.get(task.name)
        if existing is not None and _origin(existing) != _origin(task):
            raise ImproperlyConfigured(
                f"two tasks are named {task.name!r}: {_origin(existing)} and {_origin(task)}; "
                f"give one of them another name with @task(name=...)"
            )
        self._registry[task.name] = task
        return task

    def unregister(self, name: str) -> None:
        self._registry.pop(name, None)

    def get(self, name: str) -> Task:
        """The task registered under `name`, or `TaskNotFound`."""
        try:
            return self._registry[name]
        except KeyError:
            raise self.not_found(name) from None

    def not_found(self, name: str) -> TaskNotFound:
        """`TaskNotFound` for `name`, offering the registered names closest to it: a typo
        in a dispatch by name should say what was meant."""
        error = TaskNotFound(name)
        close = difflib.get_close_matches(name, list(self._registry), n=3, cutoff=0.6)
        if close:
            error.args = (f"{error.args[0]} Did you mean {' or '.join(map(repr, close))}?",)
        return error

    def find(self, name: str) -> Task | None:
        return self._registry.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._registry

    def __iter__(self) -> Iterator[Task]:
        return iter(list(self._registry.values()))

    def __len__(self) -> int:
        return len(self._registry)

    def queues(self) -> set[str]:
        """Queue names that registered tasks name explicitly."""
        return {task.options.queue for task in self if task.options.queue is not None}


registry = TaskRegistry()


def register_task(task: Task) -> Task:
    """Register a `Task` built by hand (what `@task` does for a decorated function)."""
    return registry.register(task)
