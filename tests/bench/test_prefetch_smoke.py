"""bench/prefetch.py in a small run: every configuration drains each task exactly once
(the script fails otherwise) and gets a figure; the figures are printed, never compared.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ("-c1, reads of 10", "-c1, PREFETCH_MS 20", "-c8, reads of 10", "-c8, PREFETCH_MS 20")


def test_each_configuration_drains_exactly_once_and_gets_a_figure() -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DJANGO_", "TASKRUNNER_"))}
    result = subprocess.run(  # noqa: S603 - our own script
        [sys.executable, str(ROOT / "bench" / "prefetch.py"), "--smoke"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    for label in CONFIGS:
        assert re.search(rf"^\| {re.escape(label)} \| \d+\.\d \| [\d.]+-[\d.]+ \| \d+ \|$",
                         result.stdout, re.M), (label, result.stdout)
    # reads of 10 stay 10
    assert re.search(r"^\| -c8, reads of 10 \| .* \| 10 \|$", result.stdout, re.M)
