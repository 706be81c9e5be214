"""bench/plain_bound.py in a small run: both ways of both tasks ran, every message acked
(the script fails otherwise), each figure printed, never compared."""

from __future__ import annotations

import re

from tests.bench.bench_run import run_bench


def test_both_ways_run_both_tasks() -> None:
    code, out, err = run_bench("plain_bound.py", "--jobs", "200", "--reps", "2", timeout=120,
                               merge_stderr=False)
    assert code == 0, out + err
    for name in ("bench.noop", "bench.job"):
        assert re.search(rf"{re.escape(name)} +handle +\d+\.\d \(.*\) +stripped +\d+\.\d .*"
                         r"saved at most -?\d+%", out), out
    assert len(re.findall(r"^\[\d/2\] bench\.noop handle", err, re.M)) == 2, err
