"""Every `django_taskrunner` name the docs and the README show a user imports.

Collected from the pages' code blocks and inline code: `from django_taskrunner.x import
y, z` and dotted references such as `django_taskrunner.x.y`. A dotted reference that
names a registered task (`django_taskrunner.run_django_task`) is a task name, not an
import path. The first release's module paths are checked too (DESIGN: "One public
face"): they keep working, with a `DeprecationWarning` naming the path to use now.
"""

from __future__ import annotations

import importlib
import re
import warnings
from pathlib import Path
from typing import Any

import pytest

import django_taskrunner
from django_taskrunner.core.registry import registry

ROOT = Path(__file__).resolve().parents[2]
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
CODE = re.compile(r"```.*?```|`[^`\n]+`", re.DOTALL)
FROM_IMPORT = re.compile(
    r"from[ \t]+(django_taskrunner(?:\.\w+)*)[ \t]+import[ \t]+(\([^)]*\)|[\w \t,]+)")
DOTTED = re.compile(r"(?<![\w.])django_taskrunner(?:\.\w+)+")

# What the first release's docs showed, and where each name lives now.
OLD_PATHS = {
    "django_taskrunner.connection.get_redis": "django_taskrunner.get_redis",
    "django_taskrunner.stats.get_stats": "django_taskrunner.get_stats",
    "django_taskrunner.health.get_health": "django_taskrunner.get_health",
    "django_taskrunner.health.get_leader": "django_taskrunner.get_leader",
    "django_taskrunner.election.LeaderElection": "django_taskrunner.LeaderElection",
    "django_taskrunner.autoscale.ScalingPolicy": "django_taskrunner.worker.pool.ScalingPolicy",
    "django_taskrunner.autoscale.decide": "django_taskrunner.worker.pool.decide",
    "django_taskrunner.message.PAYLOAD_MAX_DEPTH":
        "django_taskrunner.core.message.PAYLOAD_MAX_DEPTH",
    "django_taskrunner.message.MESSAGE_MAX_BYTES":
        "django_taskrunner.core.message.MESSAGE_MAX_BYTES",
    "django_taskrunner.metrics.metrics_view": "django_taskrunner.stats.metrics.metrics_view",
    # What the second release's docs showed, before its modules were merged by concept.
    "django_taskrunner.stats.health.get_health": "django_taskrunner.get_health",
    "django_taskrunner.worker.autoscale.ScalingPolicy":
        "django_taskrunner.worker.pool.ScalingPolicy",
    "django_taskrunner.worker.autoscale.decide": "django_taskrunner.worker.pool.decide",
}


def documented_names() -> set[str]:
    """Every dotted `django_taskrunner...` path the pages' code shows."""
    found = set()
    for page in PAGES:
        for code in CODE.findall(page.read_text()):
            for module, names in FROM_IMPORT.findall(code):
                for name in names.strip("()").split(","):
                    name = name.split(" as ")[0].strip()
                    if name and not name.startswith("#"):
                        found.add(f"{module}.{name}")
            found.update(DOTTED.findall(code))
    return found


def resolve(path: str) -> Any:
    """The object at a dotted path: the longest importable module, then attributes."""
    parts = path.split(".")
    for end in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        for part in parts[end:]:
            value = getattr(value, part)
        return value
    raise ImportError(path)


def test_the_docs_name_many_paths():
    assert len(documented_names()) > 30  # the collector finds what the pages show


@pytest.mark.parametrize("path", sorted(documented_names()))
def test_every_documented_name_imports(path):
    if registry.find(path) is not None:
        return  # a task's name (the Tasks framework shim), not a module path
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        resolve(path)


@pytest.mark.parametrize("name", ["get_stats", "get_health", "get_leader", "get_redis",
                                  "LeaderElection"])
def test_the_public_face_has_the_names_design_lists(name):
    assert name in django_taskrunner.__all__
    assert getattr(django_taskrunner, name) is not None


@pytest.mark.parametrize(("old", "new"), sorted(OLD_PATHS.items()))
def test_an_old_documented_path_still_imports_and_warns(old, new):
    module, _, name = old.rpartition(".")
    with pytest.warns(DeprecationWarning, match=re.escape(new)):
        value = getattr(importlib.import_module(module), name)
    assert value is resolve(new)


def test_from_import_of_an_old_path_works():
    with pytest.warns(DeprecationWarning, match="django_taskrunner.get_redis"):
        from django_taskrunner.connection import get_redis
    assert get_redis is django_taskrunner.get_redis


def test_from_import_of_an_old_path_below_the_package_works():
    with pytest.warns(DeprecationWarning, match="django_taskrunner.worker.pool.decide"):
        from django_taskrunner.worker.autoscale import decide
    assert decide is resolve("django_taskrunner.worker.pool.decide")


def test_an_old_module_refuses_a_name_it_never_had():
    import django_taskrunner.health as old_health

    with pytest.raises(AttributeError):
        old_health.no_such_name  # noqa: B018
    with pytest.raises(ImportError):
        from django_taskrunner.stats import no_such_name  # noqa: F401
