"""bench/pickup_trace.py in a small run: every stage of an idle pick-up gets a figure.

A real process with its own private Redis; the figures are printed, never asserted.
"""

from __future__ import annotations

import re

from tests.bench.bench_run import run_bench

STAGES = ("dispatch -> read returned", "read -> hand-off", "hand-off -> handle starts",
          "handle -> task starts", "dispatch -> task starts")


def test_every_stage_of_an_idle_pick_up_is_timed() -> None:
    code, out, err = run_bench("pickup_trace.py", "--tasks", "20", timeout=120,
                               merge_stderr=False)
    assert code == 0, out + err
    for stage in STAGES:
        assert re.search(rf"^{re.escape(stage)}\s+\d+\.\d{{3}} ms$", out, re.M), (
            stage, out)
