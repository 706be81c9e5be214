"""bench/queues_growth.py in smoke mode: one worker on 1 and 3 queues, idle and draining.

The figures are printed, never compared; the script itself fails unless every task of
each drain ran exactly once.
"""

from __future__ import annotations

import importlib.util

import pytest

from tests.bench.bench_run import run_bench

pytestmark = pytest.mark.skipif(importlib.util.find_spec("psutil") is None,
                                reason="psutil not installed")

CONFIGS = {
    "1, no -Q (side by side)",
    "3, no -Q (side by side)",
    "3, -Q list (strict order)",
    "3, -Q name:1 list (weighted)",
    "3, no -Q (side by side), BLOCK_MS 5000, STATS_INTERVAL 5",
    "3, -Q list (strict order), BLOCK_MS 100",
}


def run_smoke() -> str:
    code, out, err = run_bench("queues_growth.py", "--smoke", merge_stderr=False)
    assert code == 0, err
    return out


def tables(out: str) -> list[list[list[str]]]:
    """The body rows of each Markdown table in `out` (tables are separated by a blank line)."""
    found = []
    for block in out.strip().split("\n\n"):
        lines = [line for line in block.splitlines() if line.startswith("| ")]
        found.append([[c.strip() for c in line.strip("|").split("|")] for line in lines[1:]])
    return found


def number(cell: str) -> float:
    """`1,234.5`, `0.50%` or `5,729 (5,100-6,002)`: the first figure."""
    return float(cell.split()[0].rstrip("%").replace(",", ""))


def test_every_configuration_is_measured_idle_and_draining() -> None:
    main, by_command = tables(run_smoke())
    assert {row[0] for row in main} == CONFIGS
    for label, commands, per_queue, *cpu_and_counts, drain, worker_us, redis_us in main:
        assert number(commands) >= 0 and number(per_queue) >= 0, label  # 0: BLOCK_MS 5000
        assert all(number(cell) >= 0 for cell in cpu_and_counts), label
        threads, connections = (number(cell) for cell in cpu_and_counts[2:])
        assert threads >= 1 and connections >= 1, label
        assert number(drain) > 0 and number(worker_us) > 0 and number(redis_us) >= 0, label
    names = {row[0] for row in by_command}
    assert {"xreadgroup", "hset"} <= names, names  # the idle reads and the heartbeat
    assert all(len(row) == 1 + len(CONFIGS) for row in by_command)
