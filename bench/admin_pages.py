"""Admin pages: how long each page takes to render with 10,000 rows or entries behind it.

    python bench/admin_pages.py [--rows 10000] [--queued 100000] [--workers 1000]
                                [--repeat 9]

It starts its own redis-server (pinned to CPU 0 when there are two CPUs) and a fresh
SQLite database, then fills them: `--rows` failed-task rows (bulk_create), delayed tasks
(one pipelined ZADD), unique tasks dispatched with `dispatch_many` (each holds a lock, and
waits on the stream), `--queued` more plain messages waiting on the same stream (the
Tasks pages page through it), an hour of per-minute statistics, two consumers and a
leader, `--workers` worker heartbeats (each running 5 tasks: the Workers page) and a
task whose record holds 20 attempts (its page draws them on its timeline). Each
page is requested `--repeat` times through Django's test client, as a logged-in
superuser, after two warm-up requests; the figures are the median, the fastest and the
slowest, in ms. The time covers the whole request: middleware, session, database and
Redis reads, and the template.
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
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.delayed_timing import start_redis  # noqa: E402

TRACEBACK = "".join(f'  File "/srv/shop/tasks.py", line {n}, in step_{n}\n    do_it()\n'
                    for n in range(20)) + "ValueError: the mail server said no\n"


def fill_database(rows: int) -> int:
    """`rows` failed tasks; returns the primary key of one of them."""
    from django.contrib.auth.models import User
    from django.utils import timezone

    from django_taskrunner.models import FailedTask

    now = timezone.now()
    FailedTask.objects.bulk_create([
        FailedTask(task_name=f"shop.tasks.task_{n % 12}", queue=("default", "mail")[n % 2],
                   message_id=f"msg-{n}", payload=json.dumps({"order": n, "lines": list(
                       range(n % 50)), "note": "<script>alert(1)</script>"}),
                   error_class=f"shop.errors.Error{n % 7}", error=f"Error{n % 7}: failed {n}",
                   traceback=TRACEBACK, attempts=3, worker="web-1-1234",
                   failed_at=now - timedelta(seconds=7 * n)) for n in range(rows)
    ], batch_size=2000)
    User.objects.create_superuser("root", password="bench")  # noqa: S106 - a throwaway DB
    return FailedTask.objects.order_by("pk").values_list("pk", flat=True)[rows // 2]


def fill_queued(queued: int) -> None:
    """`queued` plain messages waiting on the default stream, 1,000 per round trip."""
    from django_taskrunner.core.dispatch import dispatch_many

    for start in range(0, queued, 1000):
        dispatch_many("bench.admin_site.tasks.send_receipt",
                      [{"order": n, "email": f"customer-{n}@example.com"}
                       for n in range(start, min(queued, start + 1000))])


def task_pages(queued: int) -> list[tuple[str, str]]:
    """The Tasks pages to time: list pages from the front, the middle and the end of the
    stream, a search, the running list and its JSON, a task by stream id and by id."""
    from django_taskrunner.store import get_store

    broker = get_store().streams
    client = broker.client
    stream = broker.stream("default")
    [(middle, middle_fields)] = client.xrange(stream, "-", "+", count=queued // 2)[-1:]
    middle_id = json.loads(middle_fields[b"m"])["id"]
    [(last, fields)] = client.xrevrange(stream, "+", "-", count=1)
    message_id = json.loads(fields[b"m"])["id"]
    base = "/admin/django_taskrunner/task/"
    return [
        ("tasks, queued, page 1 (50 a page)", f"{base}?queue=default"),
        ("tasks, queued, from the middle", f"{base}?queue=default&after={middle.decode()}"),
        ("tasks, queued, last page", f"{base}?queue=default&before=%2B"),
        ("tasks, queued, searched (5,000 scanned)", f"{base}?queue=default&q=no-such-name"),
        ("tasks, running", f"{base}?queue=default&status=running"),
        ("tasks, running, JSON refresh", f"{base}live/?queue=default"),
        ("task, detail by stream id", f"{base}detail/?queue=default&stream={last.decode()}"),
        ("task, detail by id, half-way down the stream (a lock's holder link)",
         f"{base}detail/?queue=default&id={middle_id}"),
        ("task, detail by id, the newest (the whole stream searched)",
         f"{base}detail/?queue=default&id={message_id}"),
        ("task, detail by id, from a failed row (nothing searched)",
         f"{base}detail/?queue=default&id=msg-78&from=failed"),
        ("queues dashboard, JSON refresh", "/admin/django_taskrunner/queue/live/"),
    ]


def fill_redis(rows: int) -> None:
    """Delayed tasks, unique locks (with their messages), statistics, consumers, a leader."""
    from django_taskrunner import TaskMessage
    from django_taskrunner.core import clock
    from django_taskrunner.core.dispatch import dispatch_many
    from django_taskrunner.store import get_store, keys

    broker = get_store().streams
    pipe = broker.client.pipeline(transaction=False)
    due = clock.now_ms() + 3_600_000
    for n in range(rows):
        body = TaskMessage(id=f"delayed-{n}", task_name="bench.admin_site.tasks.send_receipt",
                           queue="default", payload={"order": n}).to_json()
        pipe.zadd(keys.delayed_key(broker.prefix, "default"), {body: due + n * 10})
    pipe.execute()
    for start in range(0, rows, 1000):
        dispatch_many("bench.admin_site.tasks.sync_order",
                      [{"order": n} for n in range(start, min(rows, start + 1000))])
    broker.ensure_group("default")
    for consumer in ("web-1-1234-ab12", "web-2-5678-cd34"):
        broker.read("default", consumer, 5, None)
    write_an_hour_of_statistics(broker)
    broker.client.set(keys.leader_key(broker.prefix, broker.group), "web-1-1234-ab12:9f00",
                      px=10_000)


def write_an_hour_of_statistics(broker) -> None:  # type: ignore[no-untyped-def]
    from django_taskrunner.core import clock
    from django_taskrunner.stats.recorder import StatsRecorder, WorkerReport, write

    rng = random.Random(5)  # noqa: S311
    now = clock.now_ms()
    for minute in range(60, -1, -1):
        recorder = StatsRecorder()
        for task in ("bench.admin_site.tasks.send_receipt", "bench.admin_site.tasks.sync_order"):
            for _ in range(rng.randrange(20, 200)):
                failed = rng.random() < 0.03
                recorder.ran("default", task, rng.uniform(0.005, 0.2),
                             ValueError() if failed else None)
                (recorder.failed if failed else recorder.succeeded)("default", task)
        at = now - minute * 60_000
        heartbeat = WorkerReport("web-1-1234-ab12", ["default"], threads=8, busy=3,
                              min_workers=None, max_workers=8, started_ms=now - 3_600_000)
        pipe = broker.client.pipeline(transaction=False)
        write(pipe, broker.store.stats, recorder.drain(), heartbeat, now_ms=at, window=200, ttl=600)
        pipe.execute()


def fill_workers(count: int) -> None:
    """`count` worker heartbeats, each with 5 running tasks, as their monitors write them."""
    from django_taskrunner.core import clock
    from django_taskrunner.stats.recorder import WorkerReport, write
    from django_taskrunner.store import get_store

    broker = get_store().streams
    now = clock.now_ms()
    pipe = broker.client.pipeline(transaction=False)
    for n in range(count):
        running = json.dumps([[f"w{n}-t{k}", "bench.admin_site.tasks.send_receipt", "default",
                               now - 1000 * k] for k in range(5)])
        heartbeat = WorkerReport(f"host-{n % 50}-{1000 + n}-{n:04x}", ["default", "mail"],
                                 threads=8, busy=5, min_workers=2, max_workers=8,
                                 started_ms=now - 3_600_000, running=running)
        write(pipe, broker.store.stats, {}, heartbeat, now_ms=now - n, window=200, ttl=600)
    pipe.execute()


def fill_attempts(attempts: int) -> str:
    """A finished task whose record holds `attempts` attempts, and a failed row naming it
    (so its page finds it without searching the stream); returns its id."""
    from django.utils import timezone

    from django_taskrunner.core import clock
    from django_taskrunner.models import FailedTask
    from django_taskrunner.store import get_store
    from django_taskrunner.store.records import RecordWrite

    now = clock.now_ms()
    start = now - attempts * 2000
    traces = [(f"x:{n}", json.dumps([start + n * 2000 - 900, start + n * 2000 - 500,
                                     start + n * 2000 - 100, f"web-{n % 3}-1234",
                                     "failed" if n == attempts else "retrying",
                                     f"ValueError: the mail server said no ({n})"]))
              for n in range(1, attempts + 1)]
    fields = (("s", "failed"), ("t", "bench.admin_site.tasks.send_receipt"), ("q", "default"),
              ("a", str(attempts)), ("w", "web-1-1234"), ("d", str(start - 1000)),
              ("st", str(now - 500)), ("f", str(now - 100)), ("e", "ValueError: no"), *traces)
    get_store().records.write([RecordWrite("retried-20", fields, 3600, final=True)])
    FailedTask.objects.create(task_name="bench.admin_site.tasks.send_receipt", queue="default",
                              message_id="retried-20", payload="{}", error="ValueError: no",
                              attempts=attempts, failed_at=timezone.now())
    return "retried-20"


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--queued", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=9)
    options = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="tr-admin-bench-")
    redis_proc, url = start_redis(workdir)
    os.environ.update(BENCH_REDIS_URL=url, BENCH_DIR=workdir, BENCH_PREFIX="bench",
                      DJANGO_SETTINGS_MODULE="bench.admin_site.settings")
    try:
        import django

        django.setup()
        from django.core.management import call_command
        from django.test import Client
        from django.test.utils import setup_test_environment

        setup_test_environment()
        call_command("migrate", verbosity=0)
        started = time.perf_counter()
        pk = fill_database(options.rows)
        fill_redis(options.rows)
        fill_queued(options.queued)
        fill_workers(options.workers)
        timeline_id = fill_attempts(20)
        print(f"filled {options.rows:,} rows/entries of each kind and {options.queued:,} "
              f"queued messages in "
              f"{time.perf_counter() - started:.1f} s")
        client = Client()
        client.login(username="root", password="bench")  # noqa: S106
        pages = [
            ("failed tasks, list", "/admin/django_taskrunner/failedtask/"),
            ("failed tasks, filtered and searched",
             "/admin/django_taskrunner/failedtask/?queue=mail&q=failed+77"),
            ("failed task, detail", f"/admin/django_taskrunner/failedtask/{pk}/change/"),
            ("delayed tasks", "/admin/django_taskrunner/delayedtask/?queue=default"),
            ("delayed tasks, page 100", "/admin/django_taskrunner/delayedtask/?queue=default"
                                        "&p=100"),
            ("unique locks", "/admin/django_taskrunner/uniquelock/"),
            ("queues dashboard", "/admin/django_taskrunner/queue/"),
            *task_pages(options.queued),
            (f"workers, first page of 100 ({options.workers:,} workers, 5 running tasks each)",
             "/admin/django_taskrunner/worker/"),
            ("task, detail with a 20-attempt timeline",
             f"/admin/django_taskrunner/task/detail/?queue=default&id={timeline_id}"
             f"&from=failed"),
        ]
        print(f"\n| page ({options.rows:,} behind it, {options.queued + options.rows:,} on the "
              f"stream) | median ms | fastest | slowest |")
        print("|---|---|---|---|")
        for name, page_url in pages:
            times = measure(client, page_url, options.repeat)
            print(f"| {name} | {statistics.median(times):.0f} | {min(times):.0f} | "
                  f"{max(times):.0f} |")
    finally:
        redis_proc.terminate()
        redis_proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
