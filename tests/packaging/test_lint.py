"""The package, its tests and its benchmarks pass the lint rules of pyproject.toml's
[tool.ruff] (pyflakes, pycodestyle, import order, bugbear, pyupgrade, Django and bandit's
security checks), so CI fails on an unused import, a name that shadows a module, or a
line too long as it does on a failing test."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def ruff() -> str:
    """The ruff of this environment (the test group installs it)."""
    found = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(found).exists():
        pytest.fail("ruff is not installed: pip install -e . --group test")
    return found


def test_the_code_passes_the_lint_rules() -> None:
    result = subprocess.run([ruff(), "check", "--no-cache", "--output-format", "concise", "."],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
