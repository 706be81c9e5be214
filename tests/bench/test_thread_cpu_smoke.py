"""bench/thread_cpu.py in a small run: the pool's, the acker's and the fetcher's threads
are found by name and each gets a figure (which may read 0: CPU comes in 10 ms ticks);
figures are printed, never compared."""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest

from tests.bench.bench_run import run_bench

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
    pytest.mark.skipif(importlib.util.find_spec("psutil") is None, reason="psutil not installed"),
]


def test_each_thread_of_the_worker_gets_its_cpu_per_task() -> None:
    code, out, err = run_bench("thread_cpu.py", "--jobs", "6000", "--concurrency", "2",
                               timeout=180, merge_stderr=False)
    assert code == 0, out + err
    assert re.search(r"runtasks --concurrency 2: \d+ tasks in \d+\.\d\d s", out), out
    for name in ("taskrunner-acker", "taskrunner-fetch-", "taskrunner-1"):
        assert re.search(rf"^ +\d+\.\d +\(user +\d+\.\d, system +\d+\.\d\) +{name}", out,
                         re.M), out
    assert re.search(r"^ +\d+\.\d +in all$", out, re.M), out
    assert re.search(r"^context switches per task: \d+\.\d\d voluntary, \d+\.\d\d involuntary$",
                     out, re.M), out


@pytest.mark.parametrize("level", ["pool", "pool-decode"])
def test_a_pool_floor_gets_its_cpu_and_context_switches(level: str) -> None:
    code, out, err = run_bench("thread_cpu.py", "--jobs", "6000", "--floor", level,
                               timeout=180, merge_stderr=False)
    assert code == 0, out + err
    assert re.search(rf"floor.py's {level} floor: \d+ tasks in \d+\.\d\d s", out), out
    assert re.search(r"^context switches per task: \d+\.\d\d voluntary", out, re.M), out
