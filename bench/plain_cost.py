"""What fair queues cost a queue whose tasks name no key: Redis commands per task and
worker CPU per task, this checkout beside another one (the commit before fair queues).

    git archive <commit> | tar -x -C <dir>                      # the other checkout
    taskset -c 0,1 python bench/plain_cost.py --against <dir>   # 20,000 tasks, 5 reps
    python bench/plain_cost.py --against <dir> --against <dir2> # more checkouts, same rounds
    python bench/plain_cost.py --smoke                          # a quick look, this one only

Each repetition runs, for each checkout in turn, one child process (its own
django_taskrunner first on the path, this bench/ for the Django site) against one
private `redis-server` pinned to one CPU, the child pinned to the other: the child
dispatches N plain no-op tasks (dispatch_many of 500, then 200 single dispatches), then
drains them with an in-process burst worker of 4 threads. Redis's INFO commandstats
(reset before each phase) gives the commands per task of the dispatch and of the drain
(commands inside scripts counted too, and each EVALSHA once more); the drain's CPU is
`time.process_time()` of the child. Figures are medians over the repetitions; each
ratio is this checkout's over the other's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from benchlib import procs  # noqa: E402

SINGLES = 200  # tasks dispatched one by one, after the batches
CHUNK = 500


def commands(client: Any) -> dict[str, int]:
    """Calls per command since the last CONFIG RESETSTAT (INFO commandstats)."""
    return {name.removeprefix("cmdstat_"): int(value["calls"])
            for name, value in client.info("commandstats").items()}


def child(n: int) -> dict[str, Any]:
    """Dispatch and drain `n` plain tasks with the package on the path; the figures."""
    import logging

    import django

    procs.pin_self(procs.WORKER_CPU)
    django.setup()
    logging.getLogger("django_taskrunner").setLevel(logging.WARNING)
    from django_taskrunner import task
    from django_taskrunner.store import get_store
    from django_taskrunner.store.connection import get_redis
    from django_taskrunner.worker.settings import worker_settings
    from django_taskrunner.worker.worker import Worker

    ran: list[int] = []

    @task(name="bench.plain_noop", result_ttl=0)
    def plain_noop(payload: Any) -> None:
        ran.append(payload["i"])

    client = get_redis()
    client.flushall()
    client.config_resetstat()
    batched = n - SINGLES
    for start in range(0, batched, CHUNK):
        plain_noop.dispatch_many([{"i": i} for i in range(start, min(batched, start + CHUNK))])
    for i in range(batched, n):
        plain_noop.dispatch({"i": i})
    dispatched = commands(client)
    client.config_resetstat()
    worker = Worker(get_store().streams, worker_settings(("default",), concurrency=4, batch_size=10,
                                                  burst=True))
    began, cpu = time.perf_counter(), time.process_time()
    worker.run()
    wall, used = time.perf_counter() - began, time.process_time() - cpu
    drained = commands(client)
    if sorted(ran) != list(range(n)):
        raise SystemExit(f"{len(ran)} runs of {n} tasks: not exactly once")
    import django_taskrunner

    return {"dispatch": dispatched, "drain": drained, "cpu_us": used / n * 1e6,
            "wall_us": wall / n * 1e6, "package": str(Path(django_taskrunner.__file__).parent)}


def run_child(checkout: str | None, url: str, workdir: str, n: int) -> dict[str, Any]:
    """One child measuring `checkout`'s package (None: this one)."""
    env = procs.child_env(url, BENCH_DB=str(Path(workdir) / "bench.sqlite3"))
    if checkout:  # its package first on the path, this bench/ for the Django site
        env["PYTHONPATH"] = os.pathsep.join([checkout, str(BENCH)])
    argv = [sys.executable, str(Path(__file__)), "--child", "--n", str(n)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"child for {checkout or 'this checkout'} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def per_task(figures: dict[str, int], n: int) -> float:
    return sum(figures.values()) / n


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", metavar="CHECKOUT", action="append", default=[],
                        help="another checkout's root (repeatable), measured in the same "
                             "rounds")
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="1,000 tasks, 1 repetition")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke:
        args.n, args.reps = 1000, 1
    if args.child:
        print(json.dumps(child(args.n)))
        return 0
    sides: dict[str, str | None] = {"this": None}
    for other in args.against:
        if not (Path(other) / "django_taskrunner").is_dir():
            parser.error(f"--against {other}: not a checkout with a django_taskrunner")
        sides[Path(other).resolve().name] = str(Path(other).resolve())
    results: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    with procs.private_redis("bench-plain-") as (workdir, url, _):
        for _ in range(args.reps):
            for side, checkout in sides.items():
                results[side].append(run_child(checkout, url, workdir, args.n))
    report(results, args.n, args.reps)
    return 0


def report(results: dict[str, list[dict[str, Any]]], n: int, reps: int) -> None:
    def median(side: str, figure: Any) -> float:
        return statistics.median(figure(run) for run in results[side])

    rows = [("Redis commands per task, dispatch", lambda run: per_task(run["dispatch"], n)),
            ("Redis commands per task, drain", lambda run: per_task(run["drain"], n)),
            ("worker CPU per task, µs", lambda run: run["cpu_us"]),
            ("drain wall per task, µs", lambda run: run["wall_us"])]
    others = [side for side in results if side != "this"]
    print(f"plain queue (no fair key), {n:,} no-op tasks, median of {reps}; burst worker "
          f"of 4 threads; ratio: this ÷ the other")
    for side in results:
        print(f"{side}: {results[side][0]['package']}")
    print(f"{'':36} {'this':>9}" + "".join(f" {side[:16]:>16} {'ratio':>6}" for side in others))
    for label, figure in rows:
        this = median("this", figure)
        cells = "".join(f" {median(side, figure):16.2f} {this / median(side, figure):6.3f}"
                        for side in others)
        print(f"{label:36} {this:9.2f}{cells}")
    for phase in ("dispatch", "drain"):
        names = sorted({name for side in results for run in results[side]
                        for name in run[phase]})
        cells = []
        for name in names:
            counts = [statistics.median(run[phase].get(name, 0) for run in results[side])
                      for side in results]
            cells.append(f"{name} {'/'.join(f'{count:.0f}' for count in counts)}")
        print(f"{phase} commands ({'/'.join(results)}): {', '.join(cells)}")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
