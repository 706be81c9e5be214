"""bench/flush_cost.py in a small run: every message acked (the script fails otherwise),
and a figure printed for each size and for the fit, never compared."""

from __future__ import annotations

import re

from tests.bench.bench_run import run_bench


def test_each_size_gets_its_flush_cost_and_the_fit() -> None:
    code, out, _err = run_bench("flush_cost.py", "--sizes", "1,5", "--flushes", "10",
                                timeout=120)
    assert code == 0, out
    assert re.search(r"redis-py PING: \d+ µs CPU a round trip", out), out
    assert re.search(r"flush of +1 task\(s\): +\d+ µs CPU", out), out
    assert re.search(r"flush of +5 task\(s\): +\d+ µs CPU", out), out
    assert re.search(r"fit: -?\d+ µs a flush \+ -?\d+\.\d µs a task", out), out
