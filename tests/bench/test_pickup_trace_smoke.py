"""bench/pickup_trace.py in a small run: every stage of an idle pick-up gets a figure.

A real process with its own private Redis; the figures are printed, never asserted.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STAGES = ("dispatch -> read returned", "read -> hand-off", "hand-off -> handle starts",
          "handle -> task starts", "dispatch -> task starts")


def test_every_stage_of_an_idle_pick_up_is_timed() -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DJANGO_", "TASKRUNNER_"))}
    result = subprocess.run(  # noqa: S603 - our own script
        [sys.executable, str(ROOT / "bench" / "pickup_trace.py"), "--tasks", "20"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    for stage in STAGES:
        assert re.search(rf"^{re.escape(stage)}\s+\d+\.\d{{3}} ms$", result.stdout, re.M), (
            stage, result.stdout)
