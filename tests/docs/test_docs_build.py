"""The documentation builds with MkDocs in strict mode: a broken link, a page missing from
the docs folder or a bad nav entry fails the build, and so this test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mkdocs_builds_the_docs_strictly_without_warnings(tmp_path):
    build = subprocess.run(  # noqa: S603 - a fixed command line
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert build.returncode == 0, build.stderr
    assert "WARNING" not in build.stderr, build.stderr
    assert (tmp_path / "site" / "index.html").exists()
    assert (tmp_path / "site" / "getting-started" / "index.html").exists()
