"""Dispatch with its record: `record_add.lua` (the XADD and the record with its stream
id, one command per message) against the pipeline of HSET, EXPIRE and XADD (the path a
cluster takes), side by side in one process.

    taskset -c 0,1 python bench/records_dispatch.py          # --rounds 5 --batch 1000

It starts its own redis-server; each round times 10 batches of `--batch` messages and
`--batch` one-message round trips through each path, alternating; it prints the medians
(messages per second) and Redis' time per script call.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.delayed_timing import start_redis  # noqa: E402

TASK = "bench.admin_site.tasks.send_receipt"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=1000)
    options = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="tr-records-dispatch-")
    redis_proc, url = start_redis(workdir)
    os.environ.update(BENCH_REDIS_URL=url, BENCH_DIR=workdir, BENCH_PREFIX="bench",
                      DJANGO_SETTINGS_MODULE="bench.admin_site.settings")
    try:
        import django

        django.setup()
        from django_taskrunner.core.dispatch import new_message
        from django_taskrunner.core.records import dispatch_record
        from django_taskrunner.core.registry import registry
        from django_taskrunner.store import keys, scripts
        from django_taskrunner.store.broker import get_broker

        broker = get_broker()
        store = broker.records
        task = registry.get(TASK)
        stream = broker.stream("default")

        def prepared(count: int) -> list[tuple[str, object]]:
            messages = [new_message(task, {"n": n}) for n in range(count)]
            return [(m.to_json(), dispatch_record(m, task, "default")) for m in messages]

        def by_script(items: list) -> None:  # type: ignore[type-arg]
            adds = [(stream, body, record) for body, record in items]
            scripts.execute_loading(broker.client, lambda pipe: store.queue_adds(pipe, adds),
                                    ("record_add",))

        def by_pipeline(items: list) -> None:  # type: ignore[type-arg]
            pipe = broker.client.pipeline(transaction=False)
            for body, record in items:
                store.queue_new(pipe, record)
                pipe.execute_command("XADD", stream, "*", keys.ENTRY_FIELD, body)
            pipe.execute()

        rates: dict[str, dict[str, list[float]]] = {
            "record_add.lua": {"batch": [], "one": []},
            "HSET+EXPIRE+XADD pipeline": {"batch": [], "one": []}}
        paths = {"record_add.lua": by_script, "HSET+EXPIRE+XADD pipeline": by_pipeline}
        by_script(prepared(1))  # loads the script
        for _ in range(options.rounds):
            for name, path in paths.items():
                batches = [prepared(options.batch) for _ in range(10)]
                started = time.perf_counter()
                for items in batches:
                    path(items)
                rates[name]["batch"].append(10 * options.batch / (time.perf_counter() - started))
                singles = prepared(options.batch)
                started = time.perf_counter()
                for item in singles:
                    path([item])
                rates[name]["one"].append(options.batch / (time.perf_counter() - started))
        print(f"| path | batches of {options.batch:,} (messages/s) | one per round trip "
              f"(messages/s) |")
        print("|---|---:|---:|")
        for name, figures in rates.items():
            print(f"| {name} | {statistics.median(figures['batch']):,.0f} | "
                  f"{statistics.median(figures['one']):,.0f} |")
        stats = broker.client.info("commandstats").get("cmdstat_evalsha", {})
        print(f"Redis time per record_add.lua call: {stats.get('usec_per_call', 0):.1f} µs")
    finally:
        redis_proc.terminate()
        redis_proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
