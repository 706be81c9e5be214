"""The peers benchmark in smoke mode: every system runs every task exactly once.

Runs `bench/peers.py --smoke` as a real process (its own private Redis, real workers
of each library). Timing figures are printed, never asserted.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PEERS = ("celery", "rq", "dramatiq", "huey", "psutil")
missing = [name for name in PEERS if importlib.util.find_spec(name) is None]

pytestmark = pytest.mark.skipif(
    bool(missing),
    reason=f"peer libraries not installed ({', '.join(missing)}): pip install -e '.[bench]'",
)


def run_smoke() -> tuple[int, str]:
    """Run the smoke benchmark; on a timeout, SIGTERM lets it kill its workers first."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DJANGO_", "TASKRUNNER_"))}
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "peers.py"), "--smoke"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        out, _ = proc.communicate(timeout=100)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        pytest.fail(f"the smoke benchmark took over 100 s:\n{out}")
    return proc.returncode, out


def test_every_system_runs_every_task_exactly_once() -> None:
    code, out = run_smoke()
    assert code == 0, out
    assert "smoke: every system ran every task exactly once" in out
    for label in ("django-taskrunner -c1", "Celery", "RQ", "Dramatiq", "Huey", "bare"):
        assert label in out, f"{label} missing from the table"
