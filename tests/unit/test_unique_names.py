"""Names say one thing: no two public classes or top-level functions of the package share
a name, so a name found in a traceback, a log line or a grep means one thing.

Read from the source with `ast`, like the import-graph test. Private helpers (`_name`)
live and die with their module and are not counted.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import django_taskrunner

ROOT = Path(django_taskrunner.__file__).parent

# Names more than one module defines on purpose, and why.
ALLOWED = {
    # Django finds a management command by its module's name and its class `Command`.
    "Command",
    # The model of a task's row (models.py) and the task object (core/task.py): the model
    # name is in the migrations and the admin's URLs; renaming it is a schema change.
    "Task",
    # The model of the admin's Workers page (models.py, unmanaged) and the worker itself:
    # the model name is in the migrations, the admin's URLs and its permissions.
    "Worker",
    # The `conf.on_reset` hooks: each module that caches something for the current
    # settings drops it in its own `reset` (the client, the store, the settings).
    "reset",
}


def _definitions() -> dict[str, set[str]]:
    """Public top-level class and function name -> the modules that define it."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in ROOT.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        module = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if (isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                    and not node.name.startswith("_")):
                found[node.name].add(module)
    return found


def test_no_two_public_classes_or_functions_of_the_package_share_a_name():
    shared = {name: sorted(modules) for name, modules in _definitions().items()
              if len(modules) > 1 and name not in ALLOWED}
    assert shared == {}


def test_the_name_walk_sees_the_package_and_the_allowed_names_exist():
    # Guards the test above against passing because the walk found nothing, and the
    # allowed list against names that no longer clash.
    definitions = _definitions()
    assert "django_taskrunner.core.dispatch" in definitions["dispatch"]
    assert {name for name in ALLOWED if len(definitions[name]) < 2} == set()
