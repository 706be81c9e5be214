"""bench/fair.py in a small run: every case drains each task exactly once and leaves no
fair list (the script fails otherwise) and gets a figure; figures are printed, never
compared."""

from __future__ import annotations

import re

from tests.bench.bench_run import run_bench


def test_each_case_drains_exactly_once_and_gets_a_figure() -> None:
    code, out, err = run_bench("fair.py", "--smoke", timeout=300, merge_stderr=False)
    assert code == 0, out + err
    for label in ("no key", "no key, fair", "1 key", "100 keys", "2,000 keys"):
        assert re.search(rf"^{re.escape(label)} +\d+ +[\d.]+ [\d.]+x", out, re.M), (label, out)
