"""The example site a docs page runs in: its files as importable packages, its apps
installed with their tables, and everything undone afterwards.

The base is `tests/docs/example_app/` (a `shop` app with an `Order` model); a page's file
blocks are written over it. Every top-level package ends up in INSTALLED_APPS, so its
`tasks.py` is autodiscovered and its models get tables, as in a real project.
"""

from __future__ import annotations

import importlib
import shutil
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from django.apps import apps
from django.conf import settings
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.models import signals as model_signals
from django.dispatch import Signal
from django.test import override_settings

from django_taskrunner import compat
from tests.internals import saved_registry

BASE_APP = Path(__file__).with_name("example_app")

# Receivers a page may connect (dispatch_on, framework signal handlers): put back after it.
SIGNALS: list[Signal] = [
    value for value in vars(model_signals).values() if isinstance(value, Signal)
] + [compat.task_enqueued, compat.task_started, compat.task_finished]


def write_files(root: Path, files: dict[str, str]) -> list[str]:
    """The base app plus `files` under `root`, each folder a package; returns the module
    names of the written files in order (base app first)."""
    shutil.copytree(BASE_APP, root, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    for folder in [root, *root.rglob("*")]:
        if folder.is_dir() and folder != root and folder.name != "__pycache__":
            (folder / "__init__.py").touch(exist_ok=True)
    base = [str(p.relative_to(BASE_APP)) for p in sorted(BASE_APP.rglob("*.py"))]
    ordered = [p for p in base if p not in files] + list(files)
    return [path[:-3].replace("/", ".").removesuffix(".__init__") for path in ordered]


def _packages(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if (p / "__init__.py").exists())


def _forget_modules(names: list[str]) -> None:
    for name in list(sys.modules):
        if any(name == top or name.startswith(top + ".") for top in names):
            del sys.modules[name]


@contextmanager
def _snapshot_globals() -> Iterator[None]:
    """Restore the task registry and signal receivers the page changed."""
    receivers = {signal: list(signal.receivers) for signal in SIGNALS}
    with saved_registry():
        try:
            yield
        finally:
            for signal, saved in receivers.items():
                with signal.lock:
                    signal.receivers = saved
                    signal.sender_receivers_cache.clear()


@contextmanager
def _installed(labels: list[str]) -> Iterator[None]:
    """Add the apps to INSTALLED_APPS and create their tables; drop them afterwards."""
    try:
        with override_settings(INSTALLED_APPS=[*settings.INSTALLED_APPS, *labels]):
            models = [model for label in labels
                      for model in apps.get_app_config(label).get_models()]
            with connection.schema_editor() as editor:
                for model in models:
                    editor.create_model(model)
            try:
                yield
            finally:
                with connection.schema_editor() as editor:
                    for model in reversed(models):
                        editor.delete_model(model)
    finally:
        for label in labels:
            apps.all_models.pop(label, None)
        apps.clear_cache()
        ContentType.objects.clear_cache()


@contextmanager
def example_site(root: Path, files: dict[str, str]) -> Iterator[list[str]]:
    """Write the site under `root`, put it on sys.path and install its apps (which imports
    what Django imports at start-up: apps.py, models.py, tasks.py); yields the module
    names. Everything is undone on exit."""
    modules = write_files(root, files)
    packages = _packages(root)
    top_level = packages + [p.stem for p in root.glob("*.py")]
    _forget_modules(top_level)
    sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    with ExitStack() as stack:
        stack.callback(_forget_modules, top_level)
        stack.callback(sys.path.remove, str(root))
        stack.enter_context(_snapshot_globals())
        stack.enter_context(_installed(packages))
        yield modules
