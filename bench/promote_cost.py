"""What the scheduler's promotion of due delayed tasks costs: 10,000 due messages moved
onto their stream (`promote_all_due`, batches of 500), with task records (each record
then learns its new stream id) and without (`RESULT_TTL = 0`).

    taskset -c 0,1 python bench/promote_cost.py              # --tasks 10000 --reps 2
    PYTHONPATH=path/to/older/checkout python bench/promote_cost.py   # the same, before

It starts its own redis-server (pinned to CPU 0 when there are two), dispatches the
delayed tasks through the public API, then times the promotion in this process and
reads the server's time in `EVALSHA` (`INFO commandstats`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from delayed_timing import start_redis  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=2)
    options = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="tr-promote-")
    redis_proc, url = start_redis(workdir)
    os.environ.update(BENCH_REDIS_URL=url, BENCH_DB=f"{workdir}/bench.sqlite3",
                      DJANGO_SETTINGS_MODULE="djsite.settings")
    try:
        import django

        django.setup()
        from django.conf import settings
        from djsite.benchapp import tasks

        from django_taskrunner import conf
        from django_taskrunner.core import clock
        from django_taskrunner.scheduling.scheduler import promote_all_due
        from django_taskrunner.store.broker import get_broker

        base = dict(settings.TASKRUNNER)
        for _ in range(options.reps):
            for ttl in (86400, 0):
                settings.TASKRUNNER = {**base, "RESULT_TTL": ttl}
                conf.reset()
                client = get_broker().client
                client.flushall()
                for n in range(options.tasks):
                    tasks.job.dispatch_delayed({"n": n}, delay=1)
                client.config_resetstat()
                started = time.perf_counter()
                moved = promote_all_due(get_broker(), ["default"], clock.now_ms() + 5000)
                took = (time.perf_counter() - started) * 1000
                server = client.info("commandstats")["cmdstat_evalsha"]
                print(f"RESULT_TTL={ttl:>5}: promoted {moved:,} in {took:.0f} ms, "
                      f"{server['usec'] / 1000:.0f} ms of it in EVALSHA on the server "
                      f"({server['calls']} calls)", flush=True)
    finally:
        redis_proc.terminate()
        redis_proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
