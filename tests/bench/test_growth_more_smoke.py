"""The other growth benchmarks in smoke mode: bench/backlog.py, bench/memory.py and
bench/admin_growth.py run at small sizes and print every figure.

The figures are printed, never compared; where tasks run, the scripts themselves fail
unless each ran exactly once (the probes, the moved slice, the drained queue).
"""

from __future__ import annotations

import importlib.util

import pytest

from tests.bench.bench_run import run_bench

pytestmark = pytest.mark.skipif(importlib.util.find_spec("psutil") is None,
                                reason="psutil not installed")


def run(script: str, *args: str) -> str:
    code, out, _ = run_bench(script, *args, "--smoke")
    assert code == 0, out
    return out


def table_rows(out: str) -> list[list[str]]:
    """The cells of each row of the Markdown table in `out`, the header left out."""
    return [[c.strip() for c in line.strip("|").split("|")] for line in out.splitlines()
            if line.startswith("| ") and not line.startswith("|---")][1:]


def number(cell: str) -> float:
    return float(cell.split()[0].strip("*%/s").replace(",", ""))


def test_the_delayed_backlog_figures_are_all_produced() -> None:
    out = run("backlog.py")
    rows = table_rows(out)
    assert [row[0] for row in rows] == ["1,000", "2,000"], out
    for row in rows:
        size, loaded, per_task, cpu_idle, idle, moved = row[:6]
        assert number(loaded) > 0 and number(per_task) > 0 and number(cpu_idle) >= 0, row
        assert [part.strip().isdigit() for part in idle.split("/")] == [True, True], row
        assert moved.startswith(f"{number(size) // 10:,.0f} in "), row  # the slice, all moved
        assert row[-1] in {"met", "**missed**"}, row


def test_worker_memory_is_read_idle_and_draining() -> None:
    out = run("memory.py")
    rows = table_rows(out)
    assert [row[0] for row in rows] == ["2,000", "20,000"], out
    for row in rows:
        assert all(number(cell) > 0 for cell in row[1:4]), row
        assert row[-1] in {"met", "**missed**"}, row


@pytest.mark.parametrize("what", ["locks", "records"])
def test_every_admin_page_is_timed_at_each_size(what) -> None:
    rows = table_rows(run("admin_growth.py", what))
    assert len(rows) >= 12, rows
    for row in rows:
        # "-": a page that only exists at the larger size (a second page of locks)
        assert len(row) == 4 and all(cell == "-" or number(cell) >= 0 for cell in row[1:3]), row
        assert row[-1] == "met" or row[-1].startswith("**missed** at "), row
