"""bench/steps.py in a small run: each figure is printed, never compared."""

from __future__ import annotations

import re

from tests.bench.bench_run import run_bench


def test_the_step_costs_are_printed() -> None:
    code, out, err = run_bench("steps.py", "--smoke", timeout=120, merge_stderr=False)
    assert code == 0, out + err
    assert re.search(r"^no step: \d+\.\d\d µs per attempt", out, re.M), out
    assert re.search(r"^one step, first run: \d+\.\d\d µs, 3\.0 Redis commands", out, re.M), out
    assert re.search(r"^one step, kept result: \d+\.\d\d µs", out, re.M), out
