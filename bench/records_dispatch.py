"""Dispatch with its record: `record_add.lua` (the XADD and the record with its stream
id, one command per message) against the pipeline of HSET, EXPIRE and XADD (the path a
cluster took before its records kept their stream id), side by side in one process.
With `--cluster`, on a Redis Cluster: today's path there (the XADDs, then in the next
round trip `record_new.lua` per record, with its stream id) against that pipeline.

    taskset -c 0,1 python bench/records_dispatch.py          # --rounds 5 --batch 1000
    python bench/records_dispatch.py --cluster               # 3 masters, no replicas

It starts its own redis-server (or cluster); each round times 10 batches of `--batch` messages and
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

from bench.records_scale import start_store  # noqa: E402

TASK = "bench.admin_site.tasks.send_receipt"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--cluster", action="store_true",
                        help="on a local Redis Cluster (3 masters) instead of one server")
    options = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="tr-records-dispatch-")
    stop_store = start_store(workdir, options.cluster)
    os.environ.update(BENCH_DIR=workdir, BENCH_PREFIX="bench",
                      DJANGO_SETTINGS_MODULE="bench.admin_site.settings")
    try:
        import django

        django.setup()
        from django_taskrunner.core.prepare import new_message
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

        def by_broker(items: list) -> None:  # type: ignore[type-arg]
            if len(items) == 1:
                broker.add("default", items[0][0], items[0][1])
            else:
                broker.add_many("default", [body for body, _ in items],
                                [record for _, record in items])

        first = ("XADD, then record_new.lua" if store.clustered else "record_add.lua")
        paths = {first: by_broker if store.clustered else by_script,
                 "HSET+EXPIRE+XADD pipeline": by_pipeline}
        rates: dict[str, dict[str, list[float]]] = {
            name: {"batch": [], "one": []} for name in paths}
        paths[first](prepared(1))  # loads the script
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
        if not store.clustered:
            stats = broker.client.info("commandstats").get("cmdstat_evalsha", {})
            print(f"Redis time per record_add.lua call: {stats.get('usec_per_call', 0):.1f} µs")
    finally:
        stop_store()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
