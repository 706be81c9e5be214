"""The `Store` docstring indexes every public method of the store, and nothing else.

The index is how a reader finds a Redis operation without opening 20 modules (as Huey's
`BaseStorage` lists its methods); these tests keep it true as methods come and go.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import django_taskrunner.store as store_package
from django_taskrunner.store import Store

STORE_DIR = Path(store_package.__file__).parent
ENTRY = re.compile(r"^ {8}(?:(\w+)\.)?(\w+)\(([^)]*)\)", re.MULTILINE)


def indexed() -> dict[str, list[str]]:
    """`attribute.method` (or `method` of the Store itself) -> the arguments it names."""
    found: dict[str, list[str]] = {}
    for attribute, method, args in ENTRY.findall(Store.__doc__ or ""):
        name = f"{attribute}.{method}" if attribute else method
        assert name not in found, f"{name} is indexed twice"
        found[name] = [arg.strip() for arg in args.split(",") if arg.strip()]
    return found


def _public_methods(cls: type) -> dict[str, list[str]]:
    methods = {}
    for name, value in inspect.getmembers(cls):
        if name.startswith("_") or isinstance(inspect.getattr_static(cls, name), property):
            continue
        if callable(value):
            methods[name] = [p for p in inspect.signature(value).parameters if p != "self"]
    return methods


def store_parts() -> dict[str, type]:
    """Each attribute of a Store that is one of the store's classes with methods."""
    built = Store(None, "prefix")
    return {name: type(value) for name, value in vars(built).items()
            if type(value).__module__.startswith("django_taskrunner.store.")
            and _public_methods(type(value))}


def actual() -> dict[str, list[str]]:
    """Every public method of the Store and its parts, with its arguments."""
    found = {f"{name}.{method}": args for name, cls in store_parts().items()
             for method, args in _public_methods(cls).items()}
    found.update(_public_methods(Store))
    return found


def test_every_public_method_of_the_store_is_in_the_index():
    assert sorted(set(actual()) - set(indexed())) == []


def test_the_index_names_no_method_that_does_not_exist():
    assert sorted(set(indexed()) - set(actual())) == []


def test_the_index_names_each_method_with_its_arguments():
    real = actual()
    wrong = {name: (args, real[name]) for name, args in indexed().items()
             if name in real and args != real[name]}
    assert wrong == {}


def _classes_taking_a_client() -> set[str]:
    """The classes of store/ built on a Redis client (or on the Store, as the broker)."""
    found = set()
    for path in STORE_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            # connection.py's classes are ways to reach Redis, not kinds of data.
            if not isinstance(node, ast.ClassDef) or path.name in ("__init__.py",
                                                                     "connection.py"):
                continue
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    params = [arg.arg for arg in item.args.args]
                    if "client" in params or "store" in params:
                        found.add(node.name)
    return found


def test_every_class_of_the_store_on_a_client_is_an_attribute_of_the_store():
    # A new kind of data gets its attribute (and so its place in the index).
    attributes = {cls.__name__ for cls in store_parts().values()}
    assert sorted(_classes_taking_a_client() - attributes) == []


def test_the_index_checks_see_the_store():
    # Guards the tests above against passing because a walk found nothing.
    assert len(indexed()) > 100
    assert "streams.add" in indexed() and "limits.take_slot" in actual()
    assert {"Broker", "Limits", "Records"} <= _classes_taking_a_client()
    assert ENTRY.findall("        locks.gone(a, b)  frees") == [("locks", "gone", "a, b")]
