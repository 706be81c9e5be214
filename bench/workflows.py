"""Workflows: a group of no-op members with a callback, django-taskrunner against
Celery's chord, on the same private Redis.

    taskset -c 0,1 python bench/workflows.py               # 10,000 members, 3 reps
    python bench/workflows.py --members 1000 --reps 1       # a quick look

Each repetition runs the systems in turn (the order alternates): one worker process
(`runtasks --concurrency 1`; Celery `--pool solo`, its result backend on the same Redis)
pinned to its own CPU, Redis and this process on the other. After a warm-up workflow of
10 members, Redis's statistics are reset, the group is dispatched from this process,
and the time runs until the callback notes it ran (`plain`: the same tasks by
`dispatch_many`, no workflow, timed until the queue is empty). Printed per system: the
dispatch time, the time from dispatch to the callback, and what Redis did per member:
commands (INFO commandstats: every command, those scripts run included) and script
calls (EVALSHA/EVAL). BENCH_SHOW_COMMANDS=1 prints the calls per command.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import procs  # noqa: E402
from benchlib.systems import TASKRUNNER_WORKER  # noqa: E402

# This process dispatches too: the checkout the workers run (child_env), not an install.
sys.path.insert(0, os.environ.get("BENCH_CHECKOUT") or str(procs.ROOT))

CELERY_WORKER = ("-m", "celery", "-A", "benchlib.peer_apps.celery_chord_app", "worker",
                 "--pool", "solo", "-Q", "wf", "--without-heartbeat", "--without-gossip",
                 "--without-mingle", "--loglevel", "WARNING")
DONE_KEY = "bench:wf:done"


def taskrunner_dispatch(members: int) -> None:
    from djsite.benchapp.tasks import wf_done, wf_member

    from django_taskrunner import group

    group(*(wf_member.s({"n": n}) for n in range(members)), then=wf_done.s({})).dispatch()


def plain_dispatch(members: int) -> None:
    """The same members without a workflow (`dispatch_many`), then the callback alone
    once they all ran: what being a workflow's member costs."""
    from djsite.benchapp.tasks import wf_member

    wf_member.dispatch_many({"n": n} for n in range(members))


def plain_wait(client: Any, count: int, timeout: float) -> tuple[float, int]:
    """Until the stream is empty and nothing is pending (acked and deleted)."""
    from django_taskrunner.store import get_store

    broker = get_store().streams
    deadline = time.monotonic() + timeout
    while broker.length("default") or broker.pending("default"):
        if time.monotonic() > deadline:
            raise SystemExit(f"the tasks did not run within {timeout:.0f} s")
        time.sleep(0.002)
    return time.time(), PLAIN_MEMBERS[0]


PLAIN_MEMBERS = [0]


def celery_dispatch(members: int) -> None:
    from benchlib.peer_apps.celery_chord_app import done, member
    from celery import chord

    chord(member.s(n) for n in range(members))(done.s())


def wait_done(client: Any, count: int, timeout: float) -> tuple[float, int]:
    """Block until the callback noted its `count`-th run; (when, how many results)."""
    deadline = time.monotonic() + timeout
    while client.llen(DONE_KEY) < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"the callback did not run within {timeout:.0f} s")
        time.sleep(0.002)
    when, results = client.lindex(DONE_KEY, count - 1).decode().split(":")
    return float(when), int(results)


def redis_calls(client: Any) -> tuple[int, int, dict[str, int]]:
    """(every command the server ran, the script calls among them, calls per command):
    commandstats counts the commands scripts run too, under their own names."""
    stats = {name.removeprefix("cmdstat_"): int(row["calls"])
             for name, row in client.info("commandstats").items()}
    scripts = stats.get("evalsha", 0) + stats.get("eval", 0)
    return sum(stats.values()), scripts, stats


def one_run(url: str, workdir: str, system: str, members: int) -> dict[str, float]:
    import redis

    client = redis.Redis.from_url(url)
    client.flushall()
    env = procs.child_env(url, BENCH_DB=str(Path(workdir) / "bench.sqlite3"))
    argv = (procs.python(*CELERY_WORKER) if system == "celery"
            else procs.python(*TASKRUNNER_WORKER, "--concurrency", "1"))
    dispatch: Callable[[int], None] = {"taskrunner": taskrunner_dispatch,
                                       "celery": celery_dispatch,
                                       "plain": plain_dispatch}[system]
    worker = procs.spawn(argv, cpu=procs.WORKER_CPU, env=env)
    try:
        (celery_dispatch if system == "celery" else taskrunner_dispatch)(10)  # warm-up
        wait_done(client, 1, 120)
        time.sleep(0.3)
        client.config_resetstat()
        started = time.time()
        dispatch(members)
        dispatched = time.time()
        PLAIN_MEMBERS[0] = members
        finished, results = (plain_wait if system == "plain" else wait_done)(client, 2, 600)
        commands, script_calls, by_command = redis_calls(client)
    finally:
        procs.kill(worker)
    if results != members:
        raise SystemExit(f"{system}: the callback saw {results} results, not {members}")
    if os.environ.get("BENCH_SHOW_COMMANDS"):
        print(system, sorted(by_command.items(), key=lambda item: -item[1]))
    return {"dispatch_s": dispatched - started, "to_callback_s": finished - started,
            "commands": commands / members, "scripts": script_calls / members}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--systems", default="taskrunner,celery",
                        help="comma-separated subset of taskrunner,celery,plain (plain: the "
                             "members by dispatch_many, no workflow, no callback)")
    args = parser.parse_args(argv)
    procs.pin_self(procs.LOAD_CPU)
    with procs.private_redis("bench-workflows-") as (workdir, url, _):
        os.environ.update(BENCH_REDIS_URL=url, DJANGO_SETTINGS_MODULE="djsite.settings",
                          BENCH_DB=str(Path(workdir) / "bench.sqlite3"))
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        systems = args.systems.split(",")
        rows: dict[str, list[dict[str, float]]] = {system: [] for system in systems}
        for rep in range(args.reps):
            for system in (systems if rep % 2 == 0 else systems[::-1]):
                figures = one_run(url, workdir, system, args.members)
                rows[system].append(figures)
                print(f"rep {rep + 1} {system:>10}: dispatch {figures['dispatch_s']:6.2f} s  "
                      f"to callback {figures['to_callback_s']:6.2f} s  "
                      f"commands {figures['commands']:5.1f}/member  "
                      f"script calls {figures['scripts']:4.1f}/member", flush=True)
    print()
    print(f"group of {args.members:,} no-op members with a callback, one worker process, "
          f"median of {args.reps}")
    print("| system | dispatch (s) | dispatch to callback (s) | Redis commands per member "
          "| script calls per member |")
    print("|---|---:|---:|---:|---:|")
    names = {"taskrunner": "django-taskrunner (`group(..., then=...)`, -c 1)",
             "plain": "django-taskrunner, the same tasks by `dispatch_many`, no workflow",
             "celery": "Celery (`chord`, solo pool, Redis result backend)"}
    medians = {}
    for system in systems:
        median = {key: statistics.median(row[key] for row in rows[system])
                  for key in rows[system][0]}
        medians[system] = median
        print(f"| {names.get(system, system)} | {median['dispatch_s']:.2f} | "
              f"{median['to_callback_s']:.2f} | {median['commands']:.1f} | "
              f"{median['scripts']:.1f} |")
    if {"taskrunner", "celery"} <= medians.keys():
        ratio = medians["celery"]["to_callback_s"] / medians["taskrunner"]["to_callback_s"]
        print(f"dispatch to callback: Celery takes {ratio:.1f}x django-taskrunner's time")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
