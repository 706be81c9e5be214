"""Finds the fenced code blocks of a Markdown page and says what each one is.

The convention is documented in docs/contributing.md ("Code examples"). In short, for a
```python block, its first line decides:

- `# <path>.py` (e.g. `# shop/tasks.py`): a file of the example site. `# settings.py`
  is the site's settings instead; a file named `tests.py` or `test_*.py` holds tests.
- a comment containing `(for comparison)`: another library's code, shown, never run;
- `>>> ...`: a doctest;
- anything else: code run in the page's namespace, in page order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\s]*)[^`]*$")
PATH_COMMENT = re.compile(r"^#\s*(?P<path>[A-Za-z_][\w/]*\.py)\b")
COMPARISON = "(for comparison)"


@dataclass(frozen=True)
class Block:
    """One fenced block: its language tag, text, and the page line its text starts on."""

    page: Path
    lineno: int
    lang: str
    text: str

    @property
    def first_line(self) -> str:
        return self.text.lstrip("\n").split("\n", 1)[0].strip()

    @property
    def where(self) -> str:
        return f"{self.page.name}:{self.lineno}"

    @property
    def path(self) -> str | None:
        """The file a python block stands for (`shop/tasks.py`), or None."""
        match = PATH_COMMENT.match(self.first_line)
        return match.group("path") if match and self.lang in ("python", "py") else None

    @property
    def kind(self) -> str:
        """settings | file | test-file | comparison | doctest | code | bash | json | yaml | other"""
        if self.lang in ("python", "py"):
            path = self.path
            if COMPARISON in self.first_line:
                return "comparison"
            if path is not None and Path(path).name == "settings.py":
                return "settings"
            if path is not None:
                name = Path(path).name
                return "test-file" if name == "tests.py" or name.startswith("test_") else "file"
            if self.first_line.startswith(">>>"):
                return "doctest"
            return "code"
        if self.lang in ("bash", "sh", "shell", "console"):
            return "bash"
        if self.lang in ("json", "yaml"):
            return self.lang
        return "other"


def _dedent(line: str, indent: str) -> str:
    return line[len(indent):] if line.startswith(indent) else line.lstrip(" \t")


def parse_blocks(text: str, page: Path) -> list[Block]:
    """Every fenced block of `text`, in order. A fence closes on a line of at least as
    many of the same character; blocks may be indented (inside list items)."""
    blocks: list[Block] = []
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        index += 1
        if opening is None:
            continue
        indent, fence = opening.group("indent"), opening.group("fence")
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        start = index
        while index < len(lines) and not closing.match(lines[index]):
            index += 1
        body = [_dedent(line, indent) for line in lines[start:index]]
        blocks.append(Block(page=page, lineno=start + 1, lang=opening.group("info").lower(),
                            text="\n".join(body) + "\n"))
        index += 1  # past the closing fence
    return blocks
