"""bench/dispatch_cost.py in a small run: every dispatch queued one message, every batch
its hundred (the script counts them and fails otherwise) and each figure is printed,
never compared."""

from __future__ import annotations

import re

from tests.bench.bench_run import run_bench


def test_each_part_gets_its_figures_with_records_on_and_off() -> None:
    code, out, err = run_bench("dispatch_cost.py", "--smoke", timeout=120, merge_stderr=False)
    assert code == 0, out + err
    for mode, command in (("on", "XADD"), ("off", "XADD")):
        assert f"records {mode}, against the server" in out, out
        assert re.search(rf"dispatch +\d+\.\d µs wall +\d+\.\d µs CPU \| its {command} sent "
                         rf"bare", out), out
    assert len(re.findall(r"^  dispatch\(\) +\d+\.\d\d µs$", out, re.M)) == 2, out
    assert re.search(r"^  TaskMessage\.to_json_without_id +\d+\.\d\d µs$", out, re.M), out
    assert re.search(r"^  with its id: scripts\.run +\d+\.\d\d µs$", out, re.M), out
    batch_lines = re.findall(r"dispatch_many of 100 +\d+\.\d\d µs wall +\d+\.\d\d µs CPU "
                             r"per message, server +\d+\.\d\d \| raw XADD pipelined by 100", out)
    assert len(batch_lines) == 2, out  # records on and off
