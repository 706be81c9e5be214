"""bench/handle_cost.py in a small run with the no-op task: every message acked (the
script fails otherwise) and each figure printed, never compared."""

from __future__ import annotations

import re

from tests.bench.bench_run import run_bench


def test_the_handle_run_gets_its_threads_and_flushes() -> None:
    code, out, err = run_bench("handle_cost.py", "--job", "noop", "--jobs", "300", "--reps",
                               "2", timeout=120, merge_stderr=False)
    assert code == 0, out + err
    assert re.search(r"Executor\.handle \+ acker \d+\.\d µs/task .*; of it the acker's thread "
                     r"\d+\.\d µs/task, its flushes of \d+\.\d tasks \d+ µs CPU each", out), out
    assert len(re.findall(r"^\[\d/2\] loop .* flushes of", err, re.M)) == 2, err


def test_the_worker_loop_runs_every_message_through_the_worker() -> None:
    code, out, err = run_bench("handle_cost.py", "--job", "noop", "--jobs", "300", "--reps",
                               "1", "--worker-loop", timeout=120, merge_stderr=False)
    assert code == 0, out + err
    assert re.search(r"the worker's loop \+ acker \d+\.\d µs/task", out), out
