"""bench/plain_cost.py in a small run: the child dispatches and drains every task exactly
once (it fails otherwise), and each figure is printed; figures are never compared."""

from __future__ import annotations

import re

from tests.bench.bench_run import run_bench


def test_each_figure_is_printed() -> None:
    code, out, err = run_bench("plain_cost.py", "--smoke", timeout=300, merge_stderr=False)
    assert code == 0, out + err
    for label in ("Redis commands per task, dispatch", "Redis commands per task, drain",
                  "worker CPU per task, µs"):
        assert re.search(rf"^{re.escape(label)} +[\d.]+$", out, re.M), (label, out)
    assert re.search(r"^dispatch commands \(this\): .*xadd 1000", out, re.M), out
