"""A reader's path through the docs, in one fresh project, in the order the pages give it.

`django-admin startproject mysite` and `manage.py startapp shop`, then docs/getting-started.md
block by block: its settings blocks are appended to mysite/settings.py, its files written,
its `manage.py` lines run, its code and its `>>>` transcripts run in `manage.py shell`
sessions (each a process of its own, as a reader's would be). Then docs/testing.md's test
files are added to that same project and `manage.py test shop` must pass them all.

tests/docs/test_examples.py runs each page alone, on a prepared site; this test runs what
a newcomer copies, as they copy it, on the embedded Redis the pages promise.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from django_taskrunner.exceptions import EmbeddedRedisUnavailable
from django_taskrunner.store import embedded
from tests.docs.markdown_blocks import Block, parse_blocks

ROOT = Path(__file__).resolve().parents[2]
GETTING_STARTED = ROOT / "docs" / "getting-started.md"
TESTING = ROOT / "docs" / "testing.md"
# `manage.py` commands of a page run here: cheap and finite (a bare runtasks is not).
IN_FILE = re.compile(r"^#\s*in\s+(?P<path>[A-Za-z_][\w/]*\.py)\b")
RUN_COMMANDS = {"check", "migrate", "makemigrations", "shell"}
# Runs a `>>>` transcript in `manage.py shell -c`, whose globals hold its automatic imports.
DOCTEST = """
import doctest
test = doctest.DocTestParser().get_doctest({text!r}, dict(globals()), {where!r}, None, 0)
runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
runner.run(test)
raise SystemExit(1 if runner.failures else 0)
"""

pytestmark = pytest.mark.slow


class Project:
    """The reader's project: `mysite/` with its manage.py, driven like a shell would."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.root = work / "mysite"
        self.env = {key: value for key, value in os.environ.items()
                    if not key.startswith(("TASKRUNNER_", "DJANGO_")) and key != "REDIS_URL"}
        self.env["PYTHONPATH"] = str(ROOT)  # the package under test, as the install gives it

    def run(self, *args: str, cwd: Path | None = None) -> str:
        result = subprocess.run([sys.executable, *args], cwd=cwd or self.root, env=self.env,  # noqa: S603
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, (f"{shlex.join(args)} failed:\n{result.stdout[-4000:]}"
                                        f"\n{result.stderr[-4000:]}")
        return result.stdout + result.stderr

    def manage(self, *args: str) -> str:
        return self.run("manage.py", *args)

    def write(self, path: str, text: str) -> None:
        (self.root / path).write_text(text)

    def append_settings(self, text: str) -> None:
        with (self.root / "mysite" / "settings.py").open("a") as settings:
            settings.write("\n" + text)


@pytest.fixture
def project() -> Iterator[Project]:
    try:
        embedded.server_binary()
    except EmbeddedRedisUnavailable:
        pytest.skip("no redis-server binary available for the embedded Redis")
    work = Path(tempfile.mkdtemp(prefix="trrp", dir="/tmp"))  # short: a unix socket goes here
    site = Project(work)
    site.run("-m", "django", "startproject", "mysite", cwd=work)
    site.manage("startapp", "shop")
    yield site
    embedded.stop_server(site.root / ".taskrunner")
    shutil.rmtree(work, ignore_errors=True)


def blocks(page: Path) -> list[Block]:
    return parse_blocks(page.read_text(encoding="utf-8"), page)


def follow(project: Project, block: Block) -> None:
    """Do what a reader does with one block of getting-started.md."""
    if block.kind == "settings":
        project.append_settings(block.text)
    elif block.kind == "file" or fragment_of(block):
        project.write(block.path or fragment_of(block) or "", block.text)
    elif block.kind == "bash":
        for words in manage_lines(block):
            project.manage(*words)
    elif block.kind == "code" and not fragment_of(block):
        project.manage("shell", "-c", block.text)
    elif block.kind == "doctest":
        project.manage("shell", "-c", DOCTEST.format(text=block.text, where=block.where))


def fragment_of(block: Block) -> str | None:
    """`# in shop/apps.py`: what to put in that file (here, all of it)."""
    match = IN_FILE.match(block.first_line) if block.kind == "code" else None
    return match.group("path") if match else None


def manage_lines(block: Block) -> list[list[str]]:
    """The block's `python manage.py <command>` lines that run here, as argument lists."""
    lines = []
    for line in block.text.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words[:2] != ["python", "manage.py"] or len(words) < 3:
            continue
        if words[2] in RUN_COMMANDS or (words[2] == "runtasks" and "--burst" in words):
            lines.append(words[2:])
    return lines


def test_the_settings_a_reader_copies_keep_the_embedded_redis():
    """Copied as they are, the settings blocks leave the site on the embedded Redis the
    page promises: a REDIS_URL there would quietly send the reader to another server."""
    for block in blocks(GETTING_STARTED):
        if block.kind == "settings":
            values: dict = {"INSTALLED_APPS": [], "BASE_DIR": Path("mysite")}
            exec(compile(block.text, block.where, "exec"), values)  # noqa: S102 - the docs' own
            runner = values.get("TASKRUNNER", {})
            assert not {"REDIS_URL", "CONNECTION", "CLUSTER_NODES"} & runner.keys(), block.where


def in_reading_order(page: list[Block], files_first: bool) -> list[Block]:
    """The page's blocks in its order; or its settings and files first, then the rest in
    page order, as a reader who writes every file before trying anything does."""
    if not files_first:
        return page
    written = [b for b in page if b.kind in ("settings", "file") or fragment_of(b)]
    return written + [b for b in page if b not in written]


@pytest.mark.parametrize("files_first", [False, True], ids=["page-order", "files-first"])
def test_getting_started_then_the_testing_page_in_one_fresh_project(project, files_first):
    # The settings are checked first: a REDIS_URL there would send this test to that server.
    test_the_settings_a_reader_copies_keep_the_embedded_redis()
    for block in in_reading_order(blocks(GETTING_STARTED), files_first):
        follow(project, block)

    testing = blocks(TESTING)
    tasks = {b.text for b in testing if b.path == "shop/tasks.py"}
    assert tasks == {(project.root / "shop" / "tasks.py").read_text()}, (
        "testing.md shows another shop/tasks.py than getting-started.md's")
    test_files = [b for b in testing if b.kind in ("file", "test-file")
                  and b.path and b.path.startswith("shop/") and b.path != "shop/tasks.py"]
    for block in test_files:
        project.write(block.path or "", block.text)
    output = project.manage("test", "shop", "-v", "2")

    assert "\nOK" in output, output
    shown = sum(b.text.count("    def test_") for b in test_files if b.kind == "test-file")
    assert f"Ran {shown} tests" in output, output
