"""The package, its tests and its benchmarks pass the lint rules of pyproject.toml's
[tool.ruff] (pyflakes, pycodestyle, import order, bugbear, pyupgrade, Django and bandit's
security checks), so CI fails on an unused import, an undefined name or a line too long
as it does on a failing test."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def ruff() -> str:
    """The ruff of this environment (the test group installs it), else one on PATH."""
    found = Path(sys.executable).with_name("ruff")
    if found.exists():
        return str(found)
    on_path = shutil.which("ruff")
    if on_path is None:
        pytest.fail("ruff is not installed: pip install -e . --group test")
    return on_path


def test_the_code_passes_the_lint_rules() -> None:
    result = subprocess.run([ruff(), "check", "--no-cache", "--output-format", "concise", "."],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
