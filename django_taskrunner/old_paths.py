"""Module paths earlier releases' docs named, kept working after their names moved
(`from django_taskrunner.connection import get_redis`, the first release's;
`from django_taskrunner.worker.autoscale import decide`, the second's, before its modules
were merged by concept).

Each old path is a stand-in module in `sys.modules`, with no file of its own (so no
module shares its name with the one that holds the code now). Its names are looked up
on access (PEP 562 `__getattr__`): nothing is imported until old code asks, and each
access warns (`DeprecationWarning`) with the path to use now.
"""

from __future__ import annotations

import importlib
import sys
import types
import warnings
from importlib.machinery import ModuleSpec
from typing import Any

PACKAGE = "django_taskrunner"
# Old module (under the package) -> the module that holds its names now.
MOVED = {
    "autoscale": "django_taskrunner.worker.pool",
    "connection": "django_taskrunner.store.connection",
    "election": "django_taskrunner.scheduling.election",
    "health": "django_taskrunner.stats.figures",
    "message": "django_taskrunner.core.message",
    "metrics": "django_taskrunner.stats.metrics",
    "stats.health": "django_taskrunner.stats.figures",
    "worker.autoscale": "django_taskrunner.worker.pool",
}
# Names the package itself exports now: a warning names `django_taskrunner.<name>`.
PUBLIC = {"get_redis", "LeaderElection", "get_health", "get_leader", "get_stats",
          "TaskMessage"}


def moved_name(old: str, name: str, new_module: str) -> Any:
    """`name` of the module now at `new_module`, with a warning naming where to import it
    from; AttributeError (as for any module) for a name it does not have."""
    if name.startswith("_"):
        raise AttributeError(f"module {old!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(new_module), name, None)
    if value is None:
        raise AttributeError(f"module {old!r} has no attribute {name!r}")
    now = f"{PACKAGE}.{name}" if name in PUBLIC else f"{new_module}.{name}"
    warnings.warn(f"{old}.{name} has moved: use {now}", DeprecationWarning, stacklevel=3)
    return value


def _stand_in(old: str, new_module: str) -> types.ModuleType:
    module = types.ModuleType(old, f"Old path of {new_module} (deprecated).")
    module.__spec__ = ModuleSpec(old, None)

    def lookup(name: str) -> Any:
        return moved_name(old, name, new_module)

    module.__getattr__ = lookup  # type: ignore[method-assign]
    return module


def install(package: types.ModuleType) -> None:
    """Put a stand-in for every old path in `sys.modules`, and those right under the
    package on it too. One deeper (`stats.health`) is found in `sys.modules` by the import
    system once its real parent (`django_taskrunner.stats`) is imported, which this
    leaves to the importer, as importing it here would load the parent at start-up."""
    for short, new_module in MOVED.items():
        old = f"{PACKAGE}.{short}"
        module = sys.modules.setdefault(old, _stand_in(old, new_module))
        if "." not in short:
            setattr(package, short, module)
