"""The admin pages at 1x, 10x and 100x what is behind them: held unique locks, and task
records (bench/NOTES.md, "How cost grows"); the target is 300 ms a page.

    python bench/admin_growth.py locks   [--sizes 1000,10000,100000]
    python bench/admin_growth.py records [--sizes 10000,100000,1000000]
    ... --smoke                          # small sizes, one timed request a page

One private redis-server (CPU 0, with this process) and a fresh SQLite database, with
what every page needs (1,000 failed rows, 1,000 queued messages, two consumers holding
5 each, an hour of statistics, a superuser). Then, size after size, the Redis side
grows to the size (`locks`: unique tasks dispatched with `dispatch_many`, each holding
its lock while it waits on the stream; `records`: finished task records, written as in
bench/records_scale.py) and every page is requested `--repeat` times through Django's
test client after two warm-ups: the median ms of each, one column per size.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from benchlib import procs  # noqa: E402

from bench.admin_pages import fill_database, measure, write_an_hour_of_statistics  # noqa: E402
from bench.growth import markdown  # noqa: E402
from bench.records_scale import fill_queued, fill_records  # noqa: E402

TARGET_MS = 300.0
ADMIN = "/admin/django_taskrunner"
SYNC_ORDER = "bench.admin_site.tasks.sync_order"
Pages = list[tuple[str, str]]


def fill_locks(start: int, stop: int) -> list[str]:
    """Unique tasks `start`..`stop` - 1, each holding its lock; their message ids."""
    from django_taskrunner.core.dispatch import dispatch_many

    ids: list[str] = []
    for first in range(start, stop, 1000):
        ids += [message.id for message in dispatch_many(
            SYNC_ORDER, [{"order": n} for n in range(first, min(stop, first + 1000))])]
    return ids


def common_pages(queued: list[str]) -> Pages:
    """The pages every size is timed on: the lists that SCAN or page through Redis."""
    return [
        ("unique locks, first page", f"{ADMIN}/uniquelock/"),
        ("unique locks, one queue", f"{ADMIN}/uniquelock/?queue=default"),
        ("unique locks, searched: no match", f"{ADMIN}/uniquelock/?q=no-such-key"),
        ("limits", f"{ADMIN}/limit/"),
        ("queues dashboard", f"{ADMIN}/queue/"),
        ("queues dashboard, JSON refresh", f"{ADMIN}/queue/live/"),
        ("tasks, queued, page 1", f"{ADMIN}/task/?queue=default"),
        ("tasks, running", f"{ADMIN}/task/?queue=default&status=running"),
        ("task detail by id, a queued task", f"{ADMIN}/task/detail/?queue=default&id={queued[-1]}"),
        ("delayed tasks", f"{ADMIN}/delayedtask/?queue=default"),
        ("failed tasks, list", f"{ADMIN}/failedtask/"),
    ]


def lock_pages(client, holders: list[str]) -> Pages:  # type: ignore[no-untyped-def]
    """The unique-locks pages that depend on how many are held."""
    response = client.get(f"{ADMIN}/uniquelock/")
    following = response.context["next_query"] if response.context else ""
    pages = [("unique locks, searched: the task name (all match)",
              f"{ADMIN}/uniquelock/?q=sync_order"),
             ("task detail by id, a lock's holder (its link)",
              f"{ADMIN}/task/detail/?queue=default&id={holders[len(holders) // 2]}")]
    if following:
        pages.insert(0, ("unique locks, next page", f"{ADMIN}/uniquelock/?{following}"))
    return pages


def record_pages(finished: list[str]) -> Pages:
    """The pages that read one finished task's record."""
    return [("task detail by id, a succeeded task (its record)",
             f"{ADMIN}/task/detail/?queue=default&id={finished[len(finished) // 2]}"),
            ("task detail by id, a failed task (its record)",
             f"{ADMIN}/task/detail/?queue=default&id={finished[-1]}")]


def grow(what: str, client, size: int, held: list[str],  # type: ignore[no-untyped-def]
         finished: list[str]) -> Pages:
    """Grow `held` locks or `finished` records to `size`; the pages that depend on them."""
    if what == "locks":
        held += fill_locks(len(held), size)
        return lock_pages(client, held)
    finished += fill_records(size, start=len(finished))
    return record_pages(finished)


def run(args: argparse.Namespace) -> dict[str, dict[int, float]]:
    """page name -> size -> median ms."""
    import django

    django.setup()
    from django.core.management import call_command
    from django.test import Client
    from django.test.utils import setup_test_environment

    from django_taskrunner.store import get_store

    setup_test_environment()
    call_command("migrate", verbosity=0)
    fill_database(1000)
    queued = fill_queued(1000)
    broker = get_store().streams
    broker.ensure_group("default")
    for consumer in ("web-1-1234-ab12", "web-2-5678-cd34"):
        broker.read("default", consumer, 5, None)
    write_an_hour_of_statistics(broker)
    client = Client()
    client.login(username="root", password="bench")  # noqa: S106 - a throwaway database
    held: list[str] = []
    finished: list[str] = []
    medians: dict[str, dict[int, float]] = {}
    for size in args.sizes:
        pages = [*grow(args.what, client, size, held, finished), *common_pages(queued)]
        # What this process keeps to build the pages (1M ids) is not a web process's: out
        # of the garbage collector's walks, which doubled the failed list's time at 1M.
        gc.collect()
        gc.freeze()
        for name, url in pages:
            medians.setdefault(name, {})[size] = statistics.median(
                measure(client, url, args.repeat))
        print(f"{size:,}: slowest page {max(m[size] for m in medians.values()):.0f} ms "
              f"(load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
    return medians


def table(what: str, sizes: list[int], medians: dict[str, dict[int, float]]) -> str:
    thing = "held locks" if what == "locks" else "records"
    rows = []
    for name, by_size in medians.items():
        cells = ["-" if s not in by_size else f"{by_size[s]:,.0f}" if by_size[s] <= TARGET_MS
                 else f"**{by_size[s]:,.0f}**" for s in sizes]  # "-": no such page at s
        missed = [f"{s:,}" for s in sizes if by_size.get(s, 0) > TARGET_MS]
        rows.append([name, *cells, f"**missed** at {', '.join(missed)}" if missed else "met"])
    return markdown(["page (median ms)", *(f"{s:,} {thing}" for s in sizes), "< 300 ms"], rows)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["locks", "records"])
    parser.add_argument("--sizes", help="comma-separated sizes (the 1x, 10x, 100x)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="small sizes, quick")
    args = parser.parse_args(argv)
    default = {"locks": "1000,10000,100000", "records": "10000,100000,1000000"}[args.what]
    sizes = args.sizes or ("100,1000" if args.smoke else default)
    args.sizes = sorted(int(s) for s in sizes.split(","))
    if args.smoke:
        args.repeat = 1
    procs.pin_self(procs.LOAD_CPU)
    with procs.private_redis("bench-admin-growth-") as (workdir, url, _):
        os.environ.update(BENCH_REDIS_URL=url, BENCH_DIR=workdir, BENCH_PREFIX="bench",
                          DJANGO_SETTINGS_MODULE="bench.admin_site.settings")
        print(table(args.what, args.sizes, run(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
