"""bench/limit_wait_cost.py in a small run: the writes land (the script checks them and
fails otherwise) and each figure is printed, never compared."""

from __future__ import annotations

import re

from tests.bench.bench_run import run_bench


def test_both_scripts_get_a_figure_and_a_ratio() -> None:
    code, out, err = run_bench("limit_wait_cost.py", "--smoke", timeout=120,
                               merge_stderr=False)
    assert code == 0, out + err
    assert re.search(r"^ with limit waits: +\d+\.\d\d us of Redis time per task", out, re.M), out
    assert re.search(r"^ +without: +\d+\.\d\d us of Redis time per task", out, re.M), out
    assert re.search(r"^ratio with/without: \d+\.\d{3}$", out, re.M), out
