"""Every code example of the docs runs, so none can rot (convention: docs/contributing.md).

One test per page: docs/*.md and README.md, found by glob, so a new page is covered
without touching this file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.page_runner import run_page

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_the_examples_of_the_page_run(page, tmp_path):
    run_page(page, tmp_path / "site")
