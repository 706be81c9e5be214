"""bench/record_write_cost.py in a small run: the writes land (the script checks the
records' status and the index, and fails otherwise) and each figure is printed, never
compared."""

from __future__ import annotations

import re

from tests.bench.bench_run import run_bench


def test_each_index_setting_gets_its_worker_redis_and_packing_figures() -> None:
    code, out, err = run_bench("record_write_cost.py", "--smoke", timeout=120,
                               merge_stderr=False)
    assert code == 0, out + err
    for label in ("FINISHED_LIST_SIZE 10,000", r"no index \(FINISHED_LIST_SIZE 0\)"):
        assert re.search(rf"^{label}: worker \d+\.\d\d µs per record \(queue_writes\), "
                         rf"Redis \d+\.\d\d µs per record \(record_write\.lua\); packing "
                         rf"\d+\.\d\d µs per record \(the store's client\), \d+\.\d\d "
                         rf"\(redis-py's own\)$", out, re.M), out
