"""pyproject.toml declares every Django series the package is tested on."""

from __future__ import annotations

import tomllib
from pathlib import Path

import django

ROOT = Path(__file__).resolve().parents[2]


def test_the_package_metadata_allows_the_running_django():
    """pyproject.toml's bound and classifiers include every Django the tests run on."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    series = f"{django.VERSION[0]}.{django.VERSION[1]}"
    assert f"Framework :: Django :: {series}" in project["classifiers"]
    [bound] = [d for d in project["dependencies"] if d.startswith("Django")]
    upper = bound.partition("<")[2]
    assert upper and tuple(map(int, upper.split("."))) > django.VERSION[:2]
