"""Task records at scale: lookups by task id and the console pages with 1,000,000
records and 100,000 queued messages.

    taskset -c 0,1 python bench/records_scale.py            # --records 1000000 --queued 100000
    python bench/records_scale.py --records 100000 --queued 10000 --repeat 5   # a quick look
    python bench/records_scale.py --cluster        # on a local Redis Cluster (3 masters)

It starts its own redis-server (pinned to CPU 0 when there are two CPUs), or with
`--cluster` a Redis Cluster of 3 masters without replicas on loopback ports (not pinned),
and a fresh SQLite database, then fills them through the store layer with pipelined writes:
`--queued` plain messages waiting on the default stream (`dispatch_many`, 1,000 a round
trip: each with its queued record, which keeps its stream id), `--records` finished
records (`Records.queue_new`, 5,000 a round trip: succeeded with a small result, one in
ten failed with an error and a traceback), `--failed` failed-task rows, two consumers
holding 5 messages each (the running list) and an hour of statistics. Then it times
`lookup(id)` of finished and queued tasks, and each console page through Django's test
client as a logged-in superuser (two warm-up requests, then `--repeat`); figures are the
median, fastest and slowest in ms, against a 300 ms target per page. Last, `MEMORY USAGE`
of a sample of the finished records: bytes per record.
"""

from __future__ import annotations

import argparse
import json
import os
import random  # noqa: S311 - figures for a benchmark, not secrets
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.admin_pages import TRACEBACK, fill_database, write_an_hour_of_statistics  # noqa: E402
from bench.delayed_timing import start_redis  # noqa: E402
from tests.cluster.local_cluster import LocalCluster  # noqa: E402

TARGET_MS = 300.0
TASK = "bench.admin_site.tasks.send_receipt"


def start_store(workdir: str, cluster: bool) -> Callable[[], None]:
    """Start the benchmark's Redis (one server, or a cluster of 3 masters) and point the
    site's settings at it; returns what stops it."""
    if cluster:
        nodes = LocalCluster(masters=3, replicas=0).start()
        os.environ["BENCH_CLUSTER_NODES"] = ",".join(nodes.nodes)
        return nodes.stop
    redis_proc, url = start_redis(workdir)
    os.environ["BENCH_REDIS_URL"] = url

    def stop() -> None:
        redis_proc.terminate()
        redis_proc.wait(10)

    return stop


def key_count(client: Any) -> int:
    """DBSIZE of the server, or of every master of a cluster added up."""
    if hasattr(client, "get_primaries"):
        return int(client.dbsize(target_nodes=client.PRIMARIES))  # added up by redis-py
    return int(client.dbsize())


def used_memory_mb(client: Any) -> float:
    """Redis' used memory in MB: of the server, or of every master of a cluster."""
    if hasattr(client, "get_primaries"):
        return sum(client.info("memory", target_nodes=client.PRIMARIES)[node.name]
                   ["used_memory"] for node in client.get_primaries()) / 1e6
    return client.info("memory")["used_memory"] / 1e6


def fill_queued(queued: int) -> list[str]:
    """`queued` plain messages on the default stream; their ids, oldest first."""
    from django_taskrunner.core.dispatch import dispatch_many

    ids: list[str] = []
    for start in range(0, queued, 1000):
        messages = dispatch_many(TASK, [{"order": n, "email": f"customer-{n}@example.com"}
                                        for n in range(start, min(queued, start + 1000))])
        ids += [message.id for message in messages]
    return ids


def fill_records(count: int, start: int = 0) -> list[str]:
    """Finished records `start`..`count` - 1, written 5,000 a pipelined round trip; their
    ids (the same for the same numbers, so a caller can grow a set of them)."""
    from django_taskrunner.core import clock
    from django_taskrunner.store import get_store
    from django_taskrunner.store.records import RecordWrite

    broker = get_store().streams
    store = broker.records
    now = clock.now_ms()
    ids = []
    pipe = broker.client.pipeline(transaction=False)
    for n in range(start, count):
        task_id = f"{n:08x}-5e1f-4b7a-9c3d-{n:012x}"
        ids.append(task_id)
        fields = [("s", "succeeded"), ("t", TASK), ("q", "default"), ("a", "1"),
                  ("w", "web-1-1234-ab12"), ("d", str(now - 60_000)), ("ttl", "86400"),
                  ("st", str(now - 50_000)), ("f", str(now - 49_000))]
        if n % 10 == 9:
            fields[0] = ("s", "failed")
            fields += [("e", f"ValueError: the mail server said no ({n})"),
                       ("ec", "builtins.ValueError"), ("tb", TRACEBACK)]
        else:
            fields.append(("r", json.dumps({"sent": n, "ok": True})))
        store.queue_new(pipe, RecordWrite(task_id, tuple(fields), 86400))
        if len(pipe) >= 10_000:
            pipe.execute()
    pipe.execute()
    fill_finished_index(ids, now - 49_000)
    return ids


def fill_finished_index(ids: list[str], finished_ms: int) -> None:
    """The default queue's finished index as the workers' final writes leave it: the
    newest `FINISHED_LIST_SIZE` ids (10,000), a millisecond apart."""
    from django_taskrunner.conf import get_settings
    from django_taskrunner.store import get_store, keys

    broker = get_store().streams
    kept = ids[-int(get_settings().FINISHED_LIST_SIZE):]
    index = keys.finished_key(broker.prefix, "default")
    for start in range(0, len(kept), 5000):
        broker.client.zadd(index, {task_id: finished_ms - len(kept) + start + n
                                   for n, task_id in enumerate(kept[start:start + 5000])})


def moved_tasks() -> tuple[str, str, str]:
    """A delayed task (due at once) and a retried one (its first attempt read and put
    back into the delayed set as attempt 2, with its "retrying" record), made before the
    stream fills, so both are promoted behind it: their ids and the retried one's first
    stream id."""
    from dataclasses import replace

    from django_taskrunner.core import clock
    from django_taskrunner.core.dispatch import dispatch, dispatch_delayed
    from django_taskrunner.core.message import TaskMessage
    from django_taskrunner.store import get_store
    from django_taskrunner.store.records import RecordWrite
    from django_taskrunner.store.streams import Requeue

    broker = get_store().streams
    delayed = dispatch_delayed(TASK, {"order": -1}, delay=1)
    retried = dispatch(TASK, {"order": -2})
    broker.ensure_group("default")
    ((stream_id, body),) = broker.read("default", "retrier", 1, None)
    again = replace(TaskMessage.from_json(body), attempt=2).to_json()
    write = RecordWrite(retried.id, (("s", "retrying"), ("a", "2")), 7 * 86400)
    broker.settle("retrier", {}, [Requeue("default", stream_id, again, clock.now_ms() + 1)],
                  [write])
    return delayed.id, retried.id, stream_id


def promote_moved() -> None:
    """Promote what is due (the two moved tasks), as the scheduler does."""
    from django_taskrunner.core import clock
    from django_taskrunner.store import get_store

    get_store().streams.promote_due("default", clock.now_ms() + 2000, 500)


def finished_cursor() -> str:
    """The cursor of the finished list's second page."""
    from django_taskrunner.admin.tasks import finished_page

    return finished_page("default").next_cursor


def measure(client, url: str, repeat: int) -> list[float]:  # type: ignore[no-untyped-def]
    for _ in range(2):
        response = client.get(url)
        if response.status_code != 200:
            raise SystemExit(f"benchmark: {url} answered {response.status_code}")
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        client.get(url)
        times.append((time.perf_counter() - started) * 1000)
    return times


def timed_calls(call, args: list, repeat: int) -> list[float]:  # type: ignore[no-untyped-def]
    times = []
    for arg in args[:repeat]:
        started = time.perf_counter()
        call(arg)
        times.append((time.perf_counter() - started) * 1000)
    return times


def moved_rows(client, base: str, moved: tuple[str, str, str],  # type: ignore[no-untyped-def]
               repeat: int) -> str:
    """The task pages of the promoted delayed task and the retried one: with the stream
    id their records learnt when promoted, then as before (a delayed record without one,
    a retry's record naming its first, gone entry: the stream searched)."""
    from django_taskrunner.store import get_store, keys

    broker = get_store().streams
    delayed_id, retried_id, first_entry = moved
    lines = []
    for when in ("after", "before"):
        if when == "before":
            broker.client.hset(keys.record_key(broker.prefix, delayed_id), "s", "delayed")
            broker.client.hdel(keys.record_key(broker.prefix, delayed_id), "sid")
            broker.client.hset(keys.record_key(broker.prefix, retried_id), "sid", first_entry)
        for name, task_id in (("a promoted delayed task", delayed_id),
                              ("a retried task", retried_id)):
            url = f"{base}detail/?queue=default&id={task_id}"
            if task_id not in client.get(url).content.decode():
                raise SystemExit(f"benchmark: {url} does not show the task")
            lines.append(row(f"task detail by id, {name} ({when}: "
                             + ("its new stream id)" if when == "after" else
                                "no new stream id, the stream searched)"),
                             measure(client, url, repeat)))
    return "\n".join(lines)


def row(name: str, times: list[float]) -> str:
    median = statistics.median(times)
    verdict = "met" if median <= TARGET_MS else "**missed**"
    return (f"| {name} | {median:.1f} | {min(times):.1f} | {max(times):.1f} | {verdict} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--queued", type=int, default=100_000)
    parser.add_argument("--failed", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--cluster", action="store_true",
                        help="on a local Redis Cluster (3 masters) instead of one server")
    options = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="tr-records-scale-")
    stop_store = start_store(workdir, options.cluster)
    os.environ.update(BENCH_DIR=workdir, BENCH_PREFIX="bench",
                      DJANGO_SETTINGS_MODULE="bench.admin_site.settings")
    try:
        import django

        django.setup()
        from django.core.management import call_command
        from django.test import Client
        from django.test.utils import setup_test_environment

        from django_taskrunner import lookup
        from django_taskrunner.store import get_store, keys

        setup_test_environment()
        call_command("migrate", verbosity=0)
        started = time.perf_counter()
        fill_database(options.failed)
        delayed_id, retried_id, first_entry = moved_tasks()
        queued = fill_queued(options.queued)
        promote_moved()
        filled_queued = time.perf_counter() - started
        finished = fill_records(options.records)
        broker = get_store().streams
        broker.ensure_group("default")
        for consumer in ("web-1-1234-ab12", "web-2-5678-cd34"):
            broker.read("default", consumer, 5, None)
        write_an_hour_of_statistics(broker)
        client_redis = broker.client
        print(f"filled {len(queued):,} queued messages in {filled_queued:.1f} s, "
              f"{len(finished):,} finished records and {options.failed:,} failed rows in "
              f"{time.perf_counter() - started:.1f} s in all; Redis holds "
              f"{key_count(client_redis):,} keys, "
              f"{used_memory_mb(client_redis):,.0f} MB")

        rng = random.Random(7)  # noqa: S311
        sample_finished = rng.sample(finished, 200)
        sample_queued = rng.sample(queued[10:], 200)  # not the ten held by the consumers
        newest, middle = queued[-1], queued[len(queued) // 2]
        base = "/admin/django_taskrunner/task/"
        pages = [
            ("Tasks, queued, page 1 (50 a page)", f"{base}?queue=default"),
            ("Tasks, queued, from the middle",
             f"{base}?queue=default&after={lookup(middle).stream_id}"),
            ("Tasks, queued, last page", f"{base}?queue=default&before=%2B"),
            ("Tasks, running", f"{base}?queue=default&status=running"),
            ("Tasks, running, JSON refresh", f"{base}live/?queue=default"),
            ("task detail by id, a queued task half-way down the stream",
             f"{base}detail/?queue=default&id={middle}"),
            ("task detail by id, the newest queued task",
             f"{base}detail/?queue=default&id={newest}"),
            ("task detail by id, a succeeded task (its record)",
             f"{base}detail/?queue=default&id={finished[len(finished) // 2]}"),
            ("task detail by id, a failed task (its record)",
             f"{base}detail/?queue=default&id={finished[-1]}"),
            ("Tasks, finished, page 1 (10,000 listed)", f"{base}?queue=default&status=finished"),
            ("Tasks, finished, the next page",
             f"{base}?queue=default&status=finished&after={finished_cursor()}"),
            ("Tasks, finished, failed only (1 in 10)",
             f"{base}?queue=default&status=finished&outcome=failed"),
            ("Tasks, finished, cancelled only (none: 2,000 ids looked at)",
             f"{base}?queue=default&status=finished&outcome=cancelled"),
            ("failed tasks, list", "/admin/django_taskrunner/failedtask/"),
            ("queues dashboard", "/admin/django_taskrunner/queue/"),
            ("queues dashboard, JSON refresh", "/admin/django_taskrunner/queue/live/"),
        ]
        client = Client()
        client.login(username="root", password="bench")  # noqa: S106
        print(f"\n| with {len(finished):,} records, {len(queued):,} queued | median ms | "
              f"fastest | slowest | 300 ms target |")
        print("|---|---:|---:|---:|---|")
        print(row("`lookup(id)`, a finished task (200 ids)",
                  timed_calls(lookup, sample_finished, 200)))
        print(row("`lookup(id)`, a queued task (200 ids)",
                  timed_calls(lookup, sample_queued, 200)))
        for name, page_url in pages:
            print(row(name, measure(client, page_url, options.repeat)))
        # Without a stored stream id (a record written before this change, a cluster, a
        # delayed task moved by the scheduler) the page still searches the stream.
        client_redis.hdel(keys.record_key(broker.prefix, newest), "sid")
        print(row("task detail by id, the newest queued task, its record without a "
                  "stream id (the stream searched)",
                  measure(client, f"{base}detail/?queue=default&id={newest}", options.repeat)))

        print(moved_rows(client, base, (delayed_id, retried_id, first_entry), options.repeat))

        sizes = [client_redis.memory_usage(keys.record_key(broker.prefix, task_id), samples=0)
                 for task_id in sample_finished]
        succeeded = [size for task_id, size in zip(sample_finished, sizes, strict=True)
                     if int(task_id.rsplit("-", 1)[1], 16) % 10 != 9]
        failed = [size for task_id, size in zip(sample_finished, sizes, strict=True)
                  if int(task_id.rsplit("-", 1)[1], 16) % 10 == 9]
        print(f"\nMEMORY USAGE of {len(sizes)} finished records: succeeded (small result) "
              f"median {statistics.median(succeeded):.0f} bytes, failed (with a 1.2 kB "
              f"traceback) median {statistics.median(failed):.0f} bytes")
    finally:
        stop_store()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
