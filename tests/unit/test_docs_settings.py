from __future__ import annotations

import re
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


def _row(text: str, key: str) -> str:
    [row] = [line for line in text.splitlines() if line.startswith(f"| `{key}` |")]
    return row


def _figure(value: float) -> str:
    return f"{int(value):,}" if value == int(value) else str(value)


def test_the_settings_page_gives_each_numbers_range():
    from django_taskrunner.conf import NUMBERS

    text = (DOCS / "settings.md").read_text()
    for key, rule in NUMBERS.items():
        row = _row(text, key)
        span = f"{_figure(rule.minimum)} to {_figure(rule.maximum)}"
        assert span in row, (key, span, row)
        assert ("an int" in row) == rule.integer, row
        assert ("`None` or" in row) == rule.none_allowed, row


CHECK_MODULES = ("conf.py", "checks.py", "checks.py")


def test_the_settings_page_lists_exactly_the_check_ids_the_code_uses():
    package = DOCS.parent / "django_taskrunner"
    source = "".join((package / name).read_text() for name in CHECK_MODULES)
    used = set(re.findall(r"taskrunner\.[EW]\d{3}", source))
    documented = set(re.findall(r"^\| `(taskrunner\.[EW]\d{3})` \|", (DOCS / "settings.md")
                                .read_text(), re.MULTILINE))
    assert "taskrunner.E002" in used and "taskrunner.W001" in used  # the modules were read
    assert documented == used
