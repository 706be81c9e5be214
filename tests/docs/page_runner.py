"""Runs the code examples of one docs page (the convention is in docs/contributing.md).

1. `# settings.py` blocks are executed into a dict; their `TASKRUNNER` is validated and
   merged into the test's (connection keys and PREFIX stay the test's: a private Redis and
   a prefix of its own), their `TASKS` and e-mail settings replace the test's. E-mail
   starts as in a fresh `django-admin startproject` (SMTP; console MAILERS on Django 6.1),
   not as Django's test runner sets it: a page that sends mail says which backend to use.
2. File blocks are written over the example app, its apps are installed (Django imports
   their apps.py, models.py and tasks.py), and Django's system checks must find no error.
3. The blocks run in page order, in one namespace: a file block is imported there, code
   is executed, doctests are checked, `tests.py` / `test_*.py` files have their TestCases
   run, cheap `manage.py` lines of bash blocks go through `call_command`, JSON and YAML
   blocks are parsed. Warnings are errors, as a deprecation would be one release later.
"""

from __future__ import annotations

import doctest
import importlib
import io
import json
import shlex
import unittest
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

import django
from django.conf import settings
from django.core import checks
from django.core.management import call_command
from django.test import override_settings

from django_taskrunner.conf import _check_connection_alias, validate_settings
from tests.docs.example_site import example_site
from tests.docs.markdown_blocks import Block, parse_blocks

# The test run owns these: its private Redis, and a key prefix of its own.
KEPT_KEYS = ("REDIS_URL", "CONNECTION", "CLUSTER_NODES", "EMBEDDED_DIR", "PREFIX")
DEFAULT_PREFIX = "taskrunner"
# manage.py commands a bash block may show that are run for real: cheap and finite.
RUN_COMMANDS = {"check", "migrate", "taskrunner_stats"}
# Settings a page's settings block may set besides TASKRUNNER, as the reader's site would.
PAGE_SETTINGS = ("TASKS", "EMAIL_BACKEND", "MAILERS", "DEFAULT_FROM_EMAIL", "SERVER_EMAIL")


def fresh_project_mail() -> dict[str, Any]:
    """E-mail as `django-admin startproject` leaves it: Django 6.1's template sets MAILERS
    with the console backend; before it, EMAIL_BACKEND defaults to SMTP."""
    if django.VERSION >= (6, 1):
        console = "django.core.mail.backends.console.EmailBackend"
        return {"MAILERS": {"default": {"BACKEND": console}}}
    return {"EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend"}


def test_runner_mail() -> dict[str, Any]:
    """E-mail as `manage.py test` sets it: every mailer kept in memory (mail.outbox)."""
    locmem = "django.core.mail.backends.locmem.EmailBackend"
    if hasattr(settings, "MAILERS"):
        return {"MAILERS": {alias: {"BACKEND": locmem} for alias in settings.MAILERS}}
    return {"EMAIL_BACKEND": locmem}


class ExampleFailed(AssertionError):
    """An example of a page did not run as the page says."""


def run_page(page: Path, site_root: Path) -> None:
    """Run every example of `page`; raises ExampleFailed naming the page and line."""
    blocks = parse_blocks(page.read_text(encoding="utf-8"), page)
    overrides: dict[str, Any] = {}
    for block in blocks:
        if block.kind == "settings":
            overrides.update(settings_overrides(block, site_root, overrides))
    if not {"EMAIL_BACKEND", "MAILERS"} & overrides.keys():
        overrides.update(fresh_project_mail())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _run_blocks(page, site_root, blocks, overrides)


def _run_blocks(page: Path, site_root: Path, blocks: list[Block],
                overrides: dict[str, Any]) -> None:
    with override_settings(**overrides), example_site(site_root, collect_files(blocks)):
        system_checks(page)
        namespace: dict[str, Any] = {"__name__": "__main__"}
        for block in blocks:
            RUNNERS.get(block.kind, _skip)(block, namespace)


def collect_files(blocks: list[Block]) -> dict[str, str]:
    """path -> text; several blocks for one path are joined in page order."""
    files: dict[str, list[str]] = defaultdict(list)
    for block in blocks:
        if block.kind in ("file", "test-file"):
            files[block.path or ""].append(block.text)
    return {path: "\n".join(parts) for path, parts in files.items()}


def _fail(block: Block, what: str) -> ExampleFailed:
    return ExampleFailed(f"{block.where}: the {block.kind} block {what}")


def _compile(block: Block, text: str | None = None) -> Any:
    # Leading newlines make tracebacks point at the page's own line numbers.
    source = "\n" * (block.lineno - 1) + (block.text if text is None else text)
    return compile(source, str(block.page), "exec")


def settings_overrides(block: Block, site_root: Path, earlier: dict[str, Any]) -> dict[str, Any]:
    """Execute a settings block and validate it; what to apply to the test site."""
    # As in the project's settings.py: a block may extend the apps (INSTALLED_APPS += [...]).
    values: dict[str, Any] = {"__name__": "settings", "BASE_DIR": site_root,
                              "INSTALLED_APPS": list(settings.INSTALLED_APPS)}
    try:
        exec(_compile(block), values)  # noqa: S102 - the docs' own example
    except Exception as exc:
        raise _fail(block, f"raised {type(exc).__name__}: {exc}") from exc
    runner = values.get("TASKRUNNER")
    overrides: dict[str, Any] = {}
    if runner is not None:
        errors = validate_settings(runner)
        with override_settings(CACHES=values.get("CACHES", settings.CACHES)):
            errors += _check_connection_alias(runner)
        if errors:
            raise _fail(block, f"sets a bad TASKRUNNER: {[e.msg for e in errors]}")
        current = earlier.get("TASKRUNNER", settings.TASKRUNNER)
        kept = {key: value for key, value in runner.items() if key not in KEPT_KEYS}
        overrides["TASKRUNNER"] = {**current, **kept}
    overrides.update({name: values[name] for name in PAGE_SETTINGS if name in values})
    return overrides


def system_checks(page: Path) -> None:
    """Django's system checks on the page's site, as at `runserver` / `runtasks` start-up."""
    errors = [m for m in checks.run_checks() if m.level >= checks.ERROR]
    if errors:
        raise ExampleFailed(f"{page.name}: system checks failed: {errors}")


def run_code(block: Block, namespace: dict[str, Any]) -> None:
    try:
        exec(_compile(block), namespace)  # noqa: S102 - the docs' own example
    except Exception as exc:
        raise _fail(block, f"raised {type(exc).__name__}: {exc}") from exc


class PrefixChecker(doctest.OutputChecker):
    """Shows keys with the default prefix, as a reader's site would print them."""

    def check_output(self, want: str, got: str, optionflags: int) -> bool:
        got = got.replace(f"{settings.TASKRUNNER['PREFIX']}:", f"{DEFAULT_PREFIX}:")
        return super().check_output(want, got, optionflags)

    def output_difference(self, example: doctest.Example, got: str, optionflags: int) -> str:
        got = got.replace(f"{settings.TASKRUNNER['PREFIX']}:", f"{DEFAULT_PREFIX}:")
        return super().output_difference(example, got, optionflags)


def run_doctest(block: Block, namespace: dict[str, Any]) -> None:
    test = doctest.DocTestParser().get_doctest(block.text, namespace, block.where,
                                               str(block.page), block.lineno - 1)
    report = io.StringIO()
    runner = doctest.DocTestRunner(checker=PrefixChecker(), optionflags=doctest.ELLIPSIS)
    runner.run(test, out=report.write, clear_globs=False)
    namespace.update(test.globs)  # a DocTest works on a copy: later blocks see its names
    if runner.failures:
        raise _fail(block, f"failed:\n{report.getvalue()}")


def import_file(block: Block, namespace: dict[str, Any]) -> None:
    """A file block is imported where the page shows it (a no-op for a module Django
    already imported at start-up, such as a tasks.py)."""
    try:
        importlib.import_module(_module_name(block))
    except Exception as exc:
        raise _fail(block, f"raised {type(exc).__name__} on import: {exc}") from exc


def _module_name(block: Block) -> str:
    return (block.path or "")[:-3].replace("/", ".").removesuffix(".__init__")


def run_test_file(block: Block, namespace: dict[str, Any]) -> None:
    """Run the TestCases of a `tests.py` / `test_*.py` file block; they must pass."""
    suite = unittest.defaultTestLoader.loadTestsFromName(_module_name(block))
    stream = io.StringIO()
    with override_settings(**test_runner_mail()):  # a test module runs under manage.py test
        result = unittest.TextTestRunner(stream=stream, verbosity=2).run(suite)
    if not result.wasSuccessful() or result.testsRun == 0:
        raise _fail(block, f"ran {result.testsRun} tests, not all passed:\n{stream.getvalue()}")


def run_bash(block: Block, namespace: dict[str, Any]) -> None:
    """`python manage.py <cmd> ...` lines with a cheap, finite command run for real.

    A line ending in a backslash continues on the next, as in the shell. Lines that are
    not plain words (an unclosed quote spanning lines) are not commands we run."""
    for line in block.text.replace("\\\n", " ").splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        if words[:2] != ["python", "manage.py"] or len(words) < 3:
            continue
        command, args = words[2], words[3:]
        if command in RUN_COMMANDS or (command == "runtasks" and "--burst" in args):
            try:
                call_command(command, *args, stdout=io.StringIO(), stderr=io.StringIO())
            except (Exception, SystemExit) as exc:
                raise _fail(block, f"line {line.strip()!r} failed: {exc!r}") from exc


def parse_json(block: Block, namespace: dict[str, Any]) -> None:
    try:
        json.loads(block.text)
    except ValueError as exc:
        raise _fail(block, f"is not JSON: {exc}") from exc


def parse_yaml(block: Block, namespace: dict[str, Any]) -> None:
    import yaml  # comes with mkdocs, which the test extra installs

    try:
        yaml.safe_load(block.text)
    except yaml.YAMLError as exc:
        raise _fail(block, f"is not YAML: {exc}") from exc


def _skip(block: Block, namespace: dict[str, Any]) -> None:
    """Comparison blocks and other languages are shown, not run."""


RUNNERS = {
    "file": import_file,
    "code": run_code,
    "doctest": run_doctest,
    "test-file": run_test_file,
    "bash": run_bash,
    "json": parse_json,
    "yaml": parse_yaml,
}
