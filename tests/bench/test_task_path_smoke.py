"""bench/task_path.py: one task is traced from dispatch to ack, and its figures printed."""

from __future__ import annotations

import re

from tests.bench.bench_run import run_bench


def test_one_task_is_traced_from_dispatch_to_its_ack() -> None:
    code, out, _ = run_bench("task_path.py", timeout=120)
    assert code == 0, out
    found = re.search(r"^the task's path \(MainThread, taskrunner-fetch-default, "
                      r".*\): (\d+) calls, (\d+) distinct functions, (\d+) modules", out, re.M)
    assert found, out
    # The trip crosses the dispatch, the store and the worker's steps at least.
    modules = re.search(r"^modules on the path: (.*)$", out, re.M)
    assert modules, out
    for module in ("core/dispatch.py", "store/streams.py", "worker/steps.py", "worker/acker.py"):
        assert module in modules.group(1), out
