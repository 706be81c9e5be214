"""Running a bench/ script as its smoke test does: a fresh process without the suite's
DJANGO_ and TASKRUNNER_ variables (the script starts its own Redis and site), and on a
timeout SIGTERM first, so the script can stop the workers it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_bench(script: str, *args: str, timeout: float = 240.0,
              merge_stderr: bool = True) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `bench/<script> <args>`; stderr is "" when merged
    into stdout. Fails the test when it runs past `timeout` seconds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "TASKRUNNER_"))}
    proc = subprocess.Popen(  # noqa: S603 - our own script
        [sys.executable, str(ROOT / "bench" / script), *args], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"bench/{script} {' '.join(args)} took over {timeout:g} s:\n{out}{err or ''}")
    return proc.returncode, out, err or ""
