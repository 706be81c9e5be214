"""bench/start_lag.py in a small run: every probe runs, and each figure is printed,
never compared (the run fails only when a probe never ran)."""

from __future__ import annotations

import re

from tests.bench.bench_run import run_bench

ROW = r"\| \d+ \| \d+\.\d \| \d+\.\d \| \d+\.\d \|$"


def test_the_probes_run_and_both_lags_are_printed() -> None:
    code, out, err = run_bench("start_lag.py", "--smoke", timeout=240, merge_stderr=False)
    assert code == 0, out + err
    assert "30 probes x 1 reps, each after 4 CPU-bound tasks of 5 ms, --concurrency 8" in out
    assert re.search(r"^running at the task's first line: \d+ of 30 probes$", out, re.M), out
    assert re.search(r"^not seen running, or not seen with their progress: \d+$", out, re.M)
    assert re.search(r"^start lags read by the probe itself \(the observer missed its "
                     r"running\): \d+$", out, re.M), out
    assert re.search(rf"^\| start -> running readable {ROW}", out, re.M), out
    assert re.search(rf"^\| set_progress -> readable {ROW}", out, re.M), out
