"""bench/floor.py in a small run: every way of draining runs every task (the script
waits for each drain's last one, and checks that each task's record says succeeded
where its worker writes records), and each figure is printed, never compared."""

from __future__ import annotations

import re

from tests.bench.bench_run import run_bench

DRAINS = ("bare", "read", "delete", "records", "pool", "runner8", "runner1", "runner8off",
          "huey")


def test_each_drain_runs_every_task_and_prints_its_figures() -> None:
    # 1,000 tasks: CPU is read in clock ticks (10 ms), and a drain of 300 no-op tasks
    # could read as none at all
    code, out, err = run_bench("floor.py", "--jobs", "1000", "--reps", "1", timeout=180,
                               merge_stderr=False)
    assert code == 0, out + err
    for key in DRAINS:
        assert re.search(rf"^rep 1 +{key}: +[\d,]+ tasks/s +worker +\d+ us/task +"
                         rf"redis +\d+ us/task$", out, re.M), out
    assert "1,000 no-op tasks, median of 1" in out, out
    assert len(re.findall(r"^\| .+ \| [\d,]+ \| \d+\.\d\dx \| \d+ \| \d+\.\d\dx \| \d+ \|$", out,
                          re.M)) == 9
    for runner, floor in (("runner8", "records"), ("runner8", "pool"), ("runner8off", "delete")):
        assert re.search(rf"^{runner}: floor \({floor}\) \d+ us/task = \d+\.\d\dx the bare "
                         r"loop; 1\.3x leaves -?\d+ us/task for the rest of the runner, "
                         r"which takes -?\d+$", out, re.M), out
    assert re.search(r"^runner8 ÷ the pool floor: \d+\.\d\dx \(goal ≤ 1\.15x: (met|missed)\)$",
                     out, re.M), out
