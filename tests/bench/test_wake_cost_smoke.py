"""bench/wake_cost.py in a small run: each case gets its figures, printed, never compared
(how much slower code runs after a wake-up depends on the machine)."""

from __future__ import annotations

import re

from tests.bench.bench_run import run_bench

CASES = ("back to back", "after sleep(0.1 ms)", "after sleep(1 ms)", "after sleep(10 ms)",
         "thread woken by another, every 10 ms")


def test_every_case_gets_its_median_and_ratio() -> None:
    code, out, _ = run_bench("wake_cost.py", "--samples", "20", timeout=60)
    assert code == 0, out
    for case in CASES:
        assert re.search(rf"^{re.escape(case)} +\d+\.\d +\d+\.\d +\d+\.\d\dx$", out, re.M), out
