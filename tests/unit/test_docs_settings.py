from __future__ import annotations

from pathlib import Path

from django_taskrunner.conf import DEFAULTS

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_settings_page_documents_every_key():
    text = (DOCS / "settings.md").read_text()
    missing = [key for key in DEFAULTS if f"| `{key}` |" not in text]
    assert missing == []


def test_the_demo_settings_list_every_key():
    text = (DOCS.parent / "testproject" / "settings.py").read_text()
    missing = [key for key in DEFAULTS if f'"{key}":' not in text]
    assert missing == []
