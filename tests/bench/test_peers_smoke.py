"""The peers benchmark in smoke mode: every system runs every task exactly once.

Runs `bench/peers.py --smoke` as a real process (its own private Redis, real workers
of each library). Timing figures are printed, never asserted.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.bench.bench_run import run_bench

PEERS = ("celery", "rq", "dramatiq", "huey", "psutil")
missing = [name for name in PEERS if importlib.util.find_spec(name) is None]
# The async peers, in a run of their own: importable names of taskiq, taskiq-redis, streaq.
ASYNC_PEERS = ("taskiq", "taskiq_redis", "streaq", "psutil")
missing_async = [name for name in ASYNC_PEERS if importlib.util.find_spec(name) is None]
SYNC_SYSTEMS = "bare,taskrunner,taskrunner8,celery,rq,dramatiq,huey"

needs_peers = pytest.mark.skipif(
    bool(missing),
    reason=f"peer libraries not installed ({', '.join(missing)}): pip install -e . --group bench",
)


def run_smoke(systems: str) -> tuple[int, str]:
    """Run the smoke benchmark; on a timeout, SIGTERM lets it kill its workers first."""
    code, out, _ = run_bench("peers.py", "--smoke", "--systems", systems, timeout=100)
    return code, out


@needs_peers
def test_every_system_runs_every_task_exactly_once() -> None:
    code, out = run_smoke(SYNC_SYSTEMS)
    assert code == 0, out
    assert "smoke: every system ran every task exactly once" in out
    for label in ("django-taskrunner -c1", "Celery", "RQ", "Dramatiq", "Huey", "bare"):
        assert label in out, f"{label} missing from the table"


@pytest.mark.skipif(
    bool(missing_async),
    reason=f"async peer libraries not installed ({', '.join(missing_async)}): "
           "pip install -e . --group bench",
)
def test_async_peers_run_every_task_exactly_once() -> None:
    """Taskiq and streaQ, each dispatching from an event loop to its own worker process:
    300 numbered tasks each, every one run once (the script checks, and fails otherwise)."""
    code, out = run_smoke("bare,taskiq,streaq")
    assert code == 0, out
    assert "smoke: every system ran every task exactly once" in out
    for label in ("Taskiq (1 process, Redis streams)", "streaQ (1 process)"):
        rows = [line for line in out.splitlines()
                if line.startswith("| drain by one worker process") and f"| {label} |" in line]
        assert len(rows) == 1, f"{label} missing from the table:\n{out}"
        assert float(rows[0].split("|")[3].replace(",", "")) > 0


@needs_peers
def test_against_another_checkout_runs_both_in_the_same_rounds() -> None:
    """`--against` (here this very checkout): its runs appear as rows of their own and in
    the table of ratios, each figure divided by the other run's of the same round."""
    root = str(Path(__file__).resolve().parents[2])
    code, out, _ = run_bench("peers.py", "--smoke", "--systems", "bare,taskrunner",
                             "--against", root, timeout=100)
    assert code == 0, out
    assert "django-taskrunner -c1 (--against checkout)" in out
    rows = [line for line in out.splitlines()
            if line.startswith("| django-taskrunner -c1 | drain |")]
    assert len(rows) == 1, out
    assert float(rows[0].split("|")[6]) > 0  # the median of this ÷ that
