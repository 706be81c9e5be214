"""The package's import graph: no cycles, and no imports hidden inside functions.

A cycle makes the import order matter and blurs which part sits on which; an import
inside a function is the usual way to hide one. Both are read from the source with
`ast`, so the test needs nothing installed and sees imports that never run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import django_taskrunner

PACKAGE = "django_taskrunner"
ROOT = Path(django_taskrunner.__file__).parent

# None left: keep it so.
ALLOWED_CYCLES: list[set[str]] = []

# Type-only imports (`if TYPE_CHECKING:`) are arrows too: a loop they close still ties
# the modules together for a reader. These point back up on purpose, and why.
ALLOWED_TYPE_ONLY_IMPORTS = {
    # A step is a function `(executor, run)` the executor calls from its BEFORE_RUN and
    # AFTER_RUN tuples: the step names the `Executor` it is handed, nothing more.
    ("worker.steps", "worker.executor"),
    # The event loop of `async def` tasks is handed the executor that owns it.
    ("worker.async_runner", "worker.executor"),
    # A fetcher is handed the `Worker` whose buffer it fills.
    ("worker.fetcher", "worker.worker"),
    # The pause watch (in turns) is handed the `Worker` whose fetched messages it sends back.
    ("worker.turns", "worker.worker"),
    # ... and names the fetched `Delivery` objects (worker/fetcher.py) it sends back.
    ("worker.turns", "worker.fetcher"),
    # `Task`'s methods (dispatch, s, ...) call the dispatch path at run time; the modules
    # of that path name `Task` only in their annotations.
    *{(f"core.{name}", "core.task") for name in
      ("dispatch", "eager", "records", "registry", "sending", "unique",
       "workflows")},
    # A broker is built by its `Store` (store/__init__.py) and names it to reach the
    # store's other parts (records, workflows) from the ack batch.
    ("store.streams", "store"),
}

# Imports that must wait until a function runs, and why.
ALLOWED_FUNCTION_IMPORTS = {
    # AppConfig.ready(): apps.py is imported while Django loads apps, before models
    # (and anything importing them) may be imported.
    ("django_taskrunner.apps", "django_taskrunner.checks"),
    ("django_taskrunner.apps", "django_taskrunner.conf"),
    ("django_taskrunner.apps", "django_taskrunner.core.registry"),
    ("django_taskrunner.apps", "django_taskrunner.models"),
    ("django_taskrunner.apps", "django_taskrunner.scheduling.periodic"),
    # The Tasks framework shim module is autodiscovered as every app's `tasks.py`; the
    # framework (django.tasks or the backport) is imported only when a task runs.
    ("django_taskrunner.tasks", "django_taskrunner.backends"),
    ("django_taskrunner.tasks", "django_taskrunner.compat"),
    # The worker names a shim run after its framework task: the framework is imported
    # only when a shim message is counted, never by a worker that runs none.
    ("django_taskrunner.shim", "django_taskrunner.compat"),
    # A child of `runtasks --processes` is spawned: multiprocessing imports its entry
    # module before `django.setup()`, which must run before the worker's models load.
    ("django_taskrunner.worker.child_boot", "django_taskrunner.worker.child"),
    ("django_taskrunner.worker.child_boot", "django_taskrunner.runner"),
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if "migrations" in parts:
            continue
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _targets(node: ast.Import | ast.ImportFrom, module: str) -> Iterator[str]:
    """The package modules an import statement loads."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            here = module.split(".")
            if not MODULES[module].name == "__init__.py":
                here.pop()
            here = here[: len(here) - node.level + 1]
            base = ".".join([*here, base] if base else here)
        # `from pkg import name` loads pkg.name when that is a module, else pkg.
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                 for a in node.names]
    for name in names:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name.startswith(PACKAGE) and name != module:
            yield name


def _imports(module: str) -> Iterator[tuple[str, bool]]:
    """(imported module, inside a function?) for each import in `module`."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))

    def walk(node: ast.AST, in_function: bool) -> Iterator[tuple[str, bool]]:
        for child in ast.iter_child_nodes(node):
            if _is_type_checking(child):
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                for target in _targets(child, module):
                    yield target, in_function
            nested = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            yield from walk(child, nested)

    return walk(tree, False)


def _type_only_imports(module: str) -> Iterator[str]:
    """The package modules `module` imports inside `if TYPE_CHECKING:` blocks."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    for block in ast.walk(tree):
        if _is_type_checking(block):
            for node in ast.walk(block):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    yield from _targets(node, module)


def _models_by_name(module: str) -> Iterator[str]:
    """`django_taskrunner.models`, when `module` reaches one of its models by name
    (`apps.get_model("django_taskrunner", ...)`, as a module below `models` must, since
    models cannot be imported before Django's apps are ready): an arrow all the same."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get_model" and node.args
                and isinstance(node.args[0], ast.Constant) and node.args[0].value == PACKAGE):
            yield f"{PACKAGE}.models"
            return


def _graph() -> dict[str, set[str]]:
    """Every arrow, type-only ones and models reached by name too, but the type-only
    ones listed in ALLOWED_TYPE_ONLY_IMPORTS."""
    return {module: {target for target, _ in _imports(module)}
            | set(_models_by_name(module))
            | {target for target in _type_only_imports(module)
               if (_short(module), _short(target)) not in ALLOWED_TYPE_ONLY_IMPORTS}
            for module in MODULES}


def _short(module: str) -> str:
    return module.removeprefix(f"{PACKAGE}.")


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_the_package_has_no_import_cycle():
    cycles = [cycle for cycle in _cycles(_graph()) if cycle not in ALLOWED_CYCLES]
    assert cycles == []


def test_a_model_reached_by_name_is_an_arrow_to_models():
    assert f"{PACKAGE}.models" in _graph()[f"{PACKAGE}.core.outbox_rows"]


def test_no_package_module_is_imported_inside_a_function_unless_listed():
    hidden = sorted({(module, target) for module in MODULES
                     for target, in_function in _imports(module) if in_function})
    assert [pair for pair in hidden if pair not in ALLOWED_FUNCTION_IMPORTS] == []


def test_every_allowed_type_only_import_exists():
    # An entry whose import went away is removed, so the list stays a list of reasons.
    found = {(_short(module), _short(target)) for module in MODULES
             for target in _type_only_imports(module)}
    assert sorted(ALLOWED_TYPE_ONLY_IMPORTS - found) == []


def test_the_graph_sees_the_package_and_its_imports():
    # Guards the tests above against passing because the walk found nothing.
    graph = _graph()
    assert f"{PACKAGE}.core.message" in graph[f"{PACKAGE}.core.task"]  # a type-only one
    assert len(MODULES) > 50
    assert "django_taskrunner.core.dispatch" in graph["django_taskrunner"]
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [{"a", "b"}]


def _between(source: str, target: str) -> list[tuple[str, str]]:
    """(module, imported) pairs where a module of folder `source` imports one of `target`."""
    return sorted((module, imported) for module in MODULES
                  if module.startswith(f"{PACKAGE}.{source}.")
                  for imported in {i for i, _ in _imports(module)} | set(_type_only_imports(module))
                  if imported.startswith(f"{PACKAGE}.{target}."))


def test_the_worker_and_scheduling_are_siblings_that_import_neither_each_other():
    # The runner (runner.py) puts the leader's part beside the worker; neither knows the other.
    assert _between("worker", "scheduling") == []
    assert _between("scheduling", "worker") == []


def test_the_sibling_rule_sees_the_runner_import_both():
    # Guards the test above: the same walk finds the runner's arrows into both folders.
    runner = {imported for imported, _ in _imports(f"{PACKAGE}.runner")}
    assert f"{PACKAGE}.worker.worker" in runner
    assert f"{PACKAGE}.scheduling.scheduler" in runner


def _third_party_imports(module: str) -> Iterator[str]:
    """Top-level names of the modules outside the package that `module` imports."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield node.module.partition(".")[0]


STORE = f"{PACKAGE}.store"


def test_only_the_store_talks_to_redis_py():
    # The storage contract (docs/design.md): every Redis command goes through store/.
    outside = sorted(module for module in MODULES if not module.startswith(STORE)
                     and "redis" in set(_third_party_imports(module)))
    assert outside == []


def test_the_store_imports_nothing_above_it_but_settings_and_errors():
    # Arrows point down: store/ knows keys and scripts, never tasks, workers or pages.
    allowed = {f"{PACKAGE}.conf", f"{PACKAGE}.exceptions"}
    upward = sorted((module, target) for module in MODULES if module.startswith(STORE)
                    for target, _ in _imports(module)
                    if not target.startswith(STORE) and target not in allowed)
    assert upward == []


def test_the_store_checks_see_redis_imports():
    # Guards the two tests above: the store itself does import redis-py.
    assert "redis" in set(_third_party_imports(f"{STORE}.streams"))


def _store_classes() -> set[str]:
    """The classes of store/ built on a Redis client (or on the Store, as the broker)."""
    found = set()
    for module, path in MODULES.items():
        if not module.startswith(f"{STORE}."):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                init = next((item for item in node.body if isinstance(item, ast.FunctionDef)
                             and item.name == "__init__"), None)
                if init is not None and {"client", "store"} & {a.arg for a in init.args.args}:
                    found.add(node.name)
    return found


# Built outside the store on purpose, and why.
ALLOWED_STORE_BUILDS = {
    # The public `LeaderElection(client, key)` holds a lease on any key of any client it is
    # given (DESIGN); the scheduler's own lease is `Store.leader`.
    ("scheduling.election", "Lease"),
}


def _builds(module: str, names: set[str]) -> Iterator[str]:
    """The names of `names` that `module` calls (`Name(...)` or `x.Name(...)`)."""
    for node in ast.walk(ast.parse(MODULES[module].read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if called in names:
                yield called


def test_above_the_store_only_the_store_object_builds_the_store_classes():
    # One way in: `get_store()` (or a `Store` of its own client); never `Limits(client,
    # prefix)` by hand, which skips the settings the store is handed.
    classes = _store_classes()
    built = sorted({(_short(module), name) for module in MODULES
                    if not module.startswith(STORE) for name in _builds(module, classes)})
    assert [pair for pair in built if pair not in ALLOWED_STORE_BUILDS] == []


def test_the_store_build_rule_sees_the_store_classes_and_their_builds():
    # Guards the test above: the walk finds the classes, and the Store building them.
    classes = _store_classes()
    assert {"Broker", "Limits", "Records", "UniqueLocks", "Fair"} <= classes
    assert "Limits" in set(_builds(STORE, classes))
    assert ("scheduling.election", "Lease") in {
        (_short(module), name) for module in MODULES if not module.startswith(STORE)
        for name in _builds(module, classes)}


def test_the_store_reads_settings_only_where_it_is_handed_them():
    # The store's classes are handed their settings: only get_store() (store/__init__.py)
    # and the client's builder (store/connection.py) read `conf`.
    readers = sorted(module for module in MODULES if module.startswith(STORE)
                     if f"{PACKAGE}.conf" in {target for target, _ in _imports(module)})
    assert readers == [STORE, f"{STORE}.connection"]
