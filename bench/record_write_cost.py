"""What a finished task's record write costs, in one process: the worker's Python time to
queue it (`Records.queue_writes`, the acker's part) and Redis' time to run it
(`record_write.lua`, from `INFO commandstats`), with the finished index and without;
and what packing the batch's commands costs the worker, with the store's client's packer
and with redis-py's own, side by side.

    taskset -c 0,1 python bench/record_write_cost.py     # --batches 200 --batch 100
    python bench/record_write_cost.py --smoke            # a few batches: figures only

It starts its own redis-server. Each record first gets what a dispatch writes (status
"queued", task, queue, attempt, dispatch time, TTL, stream id); the index is first
filled past its cap (`FINISHED_LIST_SIZE`, 10,000), so its trims run as in a worker that
has been up a while. Then `--batches` batches of `--batch` final writes (status
"succeeded", the fields `write_outcome` gives a no-op task) go through `Records.write`,
one pipeline each, and Redis' time per record is read off the script's commandstats.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import sys
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.records_scale import start_store  # noqa: E402

INDEX_SIZES = (10_000, 0)  # FINISHED_LIST_SIZE: the default, and no index


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--smoke", action="store_true", help="5 batches of 20: figures only")
    options = parser.parse_args()
    if options.smoke:
        options.batches, options.batch = 5, 20
    workdir = tempfile.mkdtemp(prefix="tr-record-write-")
    stop_store = start_store(workdir, False)
    os.environ.update(BENCH_DIR=workdir, BENCH_PREFIX="bench",
                      DJANGO_SETTINGS_MODULE="bench.admin_site.settings")
    try:
        import django

        django.setup()
        for size in INDEX_SIZES:
            python_us, redis_us, packing = measure(size, options.batches, options.batch,
                                                   options.smoke)
            label = f"FINISHED_LIST_SIZE {size:,}" if size else "no index (FINISHED_LIST_SIZE 0)"
            print(f"{label}: worker {python_us:.2f} µs per record (queue_writes), "
                  f"Redis {redis_us:.2f} µs per record (record_write.lua); packing "
                  f"{packing[0]:.2f} µs per record (the store's client), {packing[1]:.2f} "
                  "(redis-py's own)")
    finally:
        stop_store()
        shutil.rmtree(workdir, ignore_errors=True)


def measure(index_size: int, batches: int, batch: int,
            smoke: bool) -> tuple[float, float, tuple[float, float]]:
    """(worker µs, Redis µs, (packing µs: the store's packer, redis-py's)) per final record
    write, with the index at `index_size`."""
    from django.conf import settings
    from django.test.utils import override_settings
    from redis.connection import Connection

    from django_taskrunner.conf import reset
    from django_taskrunner.core.dispatch import new_message_ids
    from django_taskrunner.store import get_store
    from django_taskrunner.store.records import RecordWrite

    with override_settings(TASKRUNNER={**settings.TASKRUNNER,
                                       "FINISHED_LIST_SIZE": index_size}):
        reset()
        client = get_store().client
        store = get_store().records
        client.flushall()
        now_ms = int(time.time() * 1000)

        def dispatched(count: int) -> list[str]:
            """`count` records as a dispatch leaves them; their ids."""
            ids = new_message_ids(count)
            pipe = client.pipeline(transaction=False)
            for task_id in ids:
                store.queue_new(pipe, RecordWrite(task_id, (
                    ("s", "queued"), ("t", "bench.job"), ("q", "default"), ("a", "1"),
                    ("d", str(now_ms)), ("ttl", "86400"), ("sid", f"{now_ms}-0")), 86400))
            pipe.execute()
            return ids

        finished = itertools.count(now_ms + 1)  # each later than the last, as in a worker

        def finals(ids: list[str]) -> list[RecordWrite]:
            return [RecordWrite(task_id, (
                ("s", "succeeded"), ("t", "bench.job"), ("q", "default"), ("a", "1"),
                ("w", "host-1-worker"), ("st", str(now_ms)), ("f", str(next(finished))),
                ("r", "null")), 86400, final=True, cancel_member=task_id) for task_id in ids]

        fill = 0 if smoke else index_size + index_size // 50  # past the cap: trims run
        for _ in range(0, fill, 1000):
            store.write(finals(dispatched(1000)))
        sample = finals(dispatched(batch))
        number = max(1, 2000 // batch)
        python_s = min(timeit.repeat(
            lambda: store.queue_writes(client.pipeline(transaction=False), sample),
            number=number, repeat=5)) / number
        pipe = client.pipeline(transaction=False)
        store.queue_writes(pipe, sample)
        commands = [args for args, _options in pipe.command_stack]
        redis_pys = Connection()._command_packer
        packers = (client.connection_pool.connection_kwargs.get("command_packer") or redis_pys,
                   redis_pys)
        packing = tuple(min(timeit.repeat(
            lambda packer=packer: [packer.pack(*args) for args in commands],
            number=number, repeat=5)) / number / batch * 1e6 for packer in packers)
        prepared = [finals(dispatched(batch)) for _ in range(batches)]
        client.config_resetstat()
        for writes in prepared:
            store.write(writes)
        script = client.info("commandstats").get("cmdstat_evalsha", {})
        check_written(client, prepared[-1], index_size)
        if not script.get("calls"):
            sys.exit("no record_write.lua call in INFO commandstats: nothing was measured")
        return python_s / batch * 1e6, script.get("usec", 0) / (batches * batch), packing


def check_written(client: Any, writes: list[Any], index_size: int) -> None:
    """Exit unless the last batch's records say "succeeded" and the index listed them,
    trimmed near its cap: a figure of writes that did not land would mean nothing."""
    from django_taskrunner.store import keys

    statuses = {client.hget(keys.record_key("bench", write.task_id), "s")
                for write in writes}
    index = keys.finished_key("bench", "default")
    listed = index_size == 0 or all(client.zscore(index, write.task_id) is not None
                                    for write in writes)
    size = client.zcard(index)
    if statuses != {b"succeeded"} or not listed or size > index_size * 1.01 + len(writes):
        sys.exit(f"record writes did not land: statuses {statuses}, all listed {listed}, "
                 f"index of {size} ids")


if __name__ == "__main__":
    main()
