"""bench/prefetch.py in a small run: every configuration drains each task exactly once
(the script fails otherwise) and gets a figure; the figures are printed, never compared.
"""

from __future__ import annotations

import re

from tests.bench.bench_run import run_bench

CONFIGS = ("-c1, reads of 10", "-c1, PREFETCH_MS 20", "-c8, reads of 10", "-c8, PREFETCH_MS 20")


def test_each_configuration_drains_exactly_once_and_gets_a_figure() -> None:
    code, out, err = run_bench("prefetch.py", "--smoke", timeout=180, merge_stderr=False)
    assert code == 0, out + err
    for label in CONFIGS:
        assert re.search(rf"^\| {re.escape(label)} \| \d+\.\d \| [\d.]+-[\d.]+ \| \d+ \|$",
                         out, re.M), (label, out)
    # reads of 10 stay 10
    assert re.search(r"^\| -c8, reads of 10 \| .* \| 10 \|$", out, re.M)
