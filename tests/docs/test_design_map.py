"""docs/design.md against the code: its map lists every module of the package once, under
its folder, and no page names a module, script or function that does not exist.

The map is the list under "## The map": one line per module, "- `<path>`: <its concept>",
each under the "### <folder>/" heading of its folder ("### Top level" for the package's
own). The other pages are read for package paths only (`core/dispatch.py`,
`store/lua/enqueue.lua`, `tests/...`); a project's own files in an example
(`shop/tasks.py`) are not the package's. docs/changelog.md keeps old paths on purpose.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "django_taskrunner"
DESIGN = ROOT / "docs" / "design.md"
PAGES = [*sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "changelog.md"),
         ROOT / "README.md"]
FOLDERS = ("core", "store", "worker", "scheduling", "stats", "admin", "management")

ENTRY = re.compile(r"^- `(?P<path>[\w/]+\.py)`: (?P<concept>.+)$")
HEADING = re.compile(r"^### (?P<title>.+)$")
PATH = re.compile(r"(?<![\w./-])(?P<path>(?:[\w*-]+/)*[\w*-]+\.(?:py|lua))\b")
CALL = re.compile(r"`(?P<owner>(?:[A-Za-z_]\w*\.)*)(?P<name>[A-Za-z_]\w*)\([^`]*\)`")
# Calls of other libraries a page may name (`django.setup()`).
OTHERS = ("django.",)
METHOD = re.compile(r"`(?P<owner>[A-Z]\w*)\.(?P<name>[a-z_]\w*)")


def package_modules() -> set[str]:
    """Every module of the package, as a path from its folder (`core/dispatch.py`)."""
    return {path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")
            if "migrations" not in path.parts}


def map_entries(text: str) -> list[tuple[str, str, str]]:
    """(heading, path, concept) of each line of the map."""
    section = text.split("\n## The map\n", 1)[1].split("\n## ", 1)[0]
    entries, heading = [], ""
    for line in section.splitlines():
        if found := HEADING.match(line):
            heading = found.group("title")
        elif found := ENTRY.match(line):
            entries.append((heading, found.group("path"), found.group("concept")))
    return entries


def exists(path: str) -> bool:
    """Whether a path a page names is there: the repository's tests/, bench/ or docs/,
    else the package (a Lua script by its name under store/lua/)."""
    if path.split("/", 1)[0] in ("tests", "bench", "docs", "django_taskrunner"):
        return any(ROOT.glob(path))
    if path.endswith(".lua") and "/" not in path:
        return any((PACKAGE / "store" / "lua").rglob(path))
    return any(PACKAGE.glob(path))


def package_paths(text: str) -> list[str]:
    """The paths of the package or the repository that `text` names."""
    return [found.group("path") for found in PATH.finditer(text)
            if found.group("path").split("/", 1)[0]
            in (*FOLDERS, "tests", "bench", "django_taskrunner", "lua", "parts")
            and found.group("path").islower()]  # `bench/NAME.py` is a placeholder


def defined_names() -> set[str]:
    """Every function, class, method and attribute name the package defines."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name | ast.arg):
                names.add(node.id if isinstance(node, ast.Name) else node.arg)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
    return names


def test_every_module_of_the_package_is_in_the_map_once():
    listed = [path for _, path, _ in map_entries(DESIGN.read_text(encoding="utf-8"))]
    assert [path for path, n in Counter(listed).items() if n > 1] == []
    assert sorted(package_modules() - set(listed)) == []  # missing from the map
    assert sorted(set(listed) - package_modules()) == []  # in the map, not in the package


def test_each_module_is_listed_under_its_folder_with_its_concept():
    misplaced = []
    for heading, path, concept in map_entries(DESIGN.read_text(encoding="utf-8")):
        folder = path.split("/", 1)[0] if "/" in path else None
        expected = "Top level" if folder is None else f"{folder}/"
        if not heading.startswith(expected) or len(concept.split()) < 3:
            misplaced.append((heading, path, concept))
    assert misplaced == []


def test_design_names_no_path_that_does_not_exist():
    text = DESIGN.read_text(encoding="utf-8")
    assert [path for path in PATH.findall(text) if not exists(path)] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_a_page_names_no_package_path_that_does_not_exist(page):
    assert [path for path in package_paths(page.read_text(encoding="utf-8"))
            if not exists(path)] == []


def test_design_names_no_function_or_method_that_does_not_exist():
    text = DESIGN.read_text(encoding="utf-8")
    names = defined_names()
    called = {found.group("name") for found in CALL.finditer(text)
              if not found.group("owner").startswith(OTHERS)}
    methods = {(found.group("owner"), found.group("name")) for found in METHOD.finditer(text)}
    assert sorted(called - names) == []
    assert sorted((owner, name) for owner, name in methods
                  if owner not in names or name not in names) == []


def store_attributes() -> dict[str, str]:
    """`Store`'s data attributes and the class of each, read from `Store.__init__`."""
    tree = ast.parse((PACKAGE / "store" / "__init__.py").read_text(encoding="utf-8"))
    init = next(node for node in ast.walk(tree)
                if isinstance(node, ast.FunctionDef) and node.name == "__init__")
    return {node.targets[0].attr: node.value.func.id for node in init.body
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)}


def test_the_store_table_has_each_attribute_with_its_class_and_module():
    rows = re.findall(r"^\| `(\w+)` \| `(\w+)` \| `([\w/]+\.py)` \|",
                      DESIGN.read_text(encoding="utf-8"), re.MULTILINE)
    assert {attribute: cls for attribute, cls, _ in rows} == store_attributes()
    for _, cls, module in rows:
        assert f"class {cls}" in (PACKAGE / module).read_text(encoding="utf-8"), (cls, module)


def test_the_checks_see_what_is_gone():
    # Guards the tests above: names and paths the last layout had are refused.
    assert not exists("core/wire.py") and not exists("worker/steps/record.py")
    assert exists("core/message.py") and exists("store/lua/parts/free_keys.lua")
    assert exists("enqueue.lua") and exists("tests/unit/test_import_graph.py")
    assert "failed_for_good" not in defined_names() and "fail_for_good" in defined_names()
    assert package_paths("see `core/due.py` and shop/tasks.py") == ["core/due.py"]
    assert map_entries("\n## The map\n### core/\n- `core/task.py`: a task\n## Next\n") == [
        ("core/", "core/task.py", "a task")]
    assert {m.group("name") for m in CALL.finditer("`failed_for_good()` `x.y(a, b)`")} == {
        "failed_for_good", "y"}
    assert store_attributes()["streams"] == "Broker" and len(store_attributes()) > 15
