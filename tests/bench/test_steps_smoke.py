"""bench/steps.py in a small run: each figure is printed, never compared."""

from __future__ import annotations

import re

from tests.bench.bench_run import run_bench


def test_the_step_costs_are_printed() -> None:
    code, out, err = run_bench("steps.py", "--smoke", timeout=120, merge_stderr=False)
    assert code == 0, out + err
    assert re.search(r"^no step: \d+\.\d\d µs per attempt", out, re.M), out
    assert re.search(r"^first step, not kept yet, first run of its task id: \d+\.\d\d µs, "
                     r"2\.0 Redis commands", out, re.M), out
    assert re.search(r"^first step, not kept yet, a later run, nothing kept: \d+\.\d\d µs, "
                     r"3\.0 Redis commands", out, re.M), out
    assert re.search(r"^step already kept \(a later run\): \d+\.\d\d µs, 1\.0 Redis", out,
                     re.M), out
