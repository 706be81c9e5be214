"""bench/records.py in a small run: each mode drains every task (the script waits for
the last one and counts the records it left), and each figure is printed, never
compared."""

from __future__ import annotations

import re

from tests.bench.bench_run import run_bench


def test_each_mode_drains_and_prints_its_figures_and_the_memory_per_record() -> None:
    code, out, err = run_bench("records.py", "--jobs", "200", "--reps", "1",
                               "--concurrency", "8", timeout=180, merge_stderr=False)
    assert code == 0, out + err
    for mode, left in (("on", "200"), ("no index", "200"), ("off", "0")):
        assert re.search(rf"^rep 1 records +{mode}: +[\d,]+ tasks/s +worker +\d+ us/task +"
                         rf"redis +\d+ us/task +records left {left}$", out, re.M), out
    assert "200 no-op tasks, --concurrency 8, median of 1" in out, out
    for mode in ("on", "no index"):
        assert re.search(rf"^records {mode}: cost -?\d+\.\d% of the drain rate", out, re.M), out
    assert re.search(r"^Redis memory per finished record: \d+ bytes on average", out, re.M), out
