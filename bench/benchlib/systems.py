"""The systems under test: how to start each one's worker, and what they are called."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass

from benchlib.procs import python


@dataclass(frozen=True)
class System:
    """One worker set-up; `producer` names the sender in `benchlib.producer`."""

    key: str
    label: str
    producer: str
    worker: tuple[str, ...]
    dispatch_mode: str = "plain"  # how the tasks drained are dispatched (and timed)
    peer: bool = False  # one of the libraries we compare against
    package: str | None = None  # distribution whose version the report names
    needs: tuple[str, ...] = ()  # distributions the system needs besides the project's


TASKRUNNER_WORKER = ("-m", "django", "runtasks", "--settings", "djsite.settings",
                     "--log-level", "WARNING")

SYSTEMS = [
    System("bare", "bare XREADGROUP/XACK loop", "bare", ("-m", "benchlib.bare_worker")),
    System("taskrunner", "django-taskrunner -c1", "taskrunner",
           (*TASKRUNNER_WORKER, "--concurrency", "1"), package="django-taskrunner"),
    System("taskrunner8", "django-taskrunner -c8", "taskrunner",
           (*TASKRUNNER_WORKER, "--concurrency", "8"), dispatch_mode="many",
           package="django-taskrunner"),
    System("celery", "Celery (solo pool)", "celery",
           ("-m", "celery", "-A", "benchlib.peer_apps.celery_app", "worker", "--pool", "solo",
            "--concurrency", "1", "-Q", "bench", "--without-heartbeat", "--without-gossip",
            "--without-mingle", "--loglevel", "WARNING"), peer=True, package="celery",
           needs=("celery",)),
    System("rq", "RQ (SimpleWorker)", "rq", ("-m", "benchlib.peer_apps.rq_tasks"),
           peer=True, package="rq", needs=("rq",)),
    System("dramatiq", "Dramatiq (1 process, 8 threads)", "dramatiq",
           ("-m", "dramatiq", "benchlib.peer_apps.dramatiq_tasks", "--processes", "1",
            "--threads", "8"), peer=True, package="dramatiq", needs=("dramatiq",)),
    System("huey", "Huey (2 threads)", "huey",
           ("-m", "huey.bin.huey_consumer", "benchlib.peer_apps.huey_tasks.huey", "-w", "2",
            "-k", "thread", "-q"), peer=True, package="huey", needs=("huey",)),
    # The async peers, each in one process as its docs start it (the apps say how).
    System("taskiq", "Taskiq (1 process, Redis streams)", "taskiq",
           ("-m", "taskiq", "worker", "benchlib.peer_apps.taskiq_tasks:broker", "--workers",
            "1", "--log-level", "WARNING"), peer=True, package="taskiq",
           needs=("taskiq", "taskiq-redis")),
    System("streaq", "streaQ (1 process)", "streaq",
           ("-m", "streaq", "run", "benchlib.peer_apps.streaq_tasks:worker", "--workers", "1"),
           peer=True, package="streaq", needs=("streaq",)),
]

BY_KEY = {system.key: system for system in SYSTEMS}


def worker_argv(system: System) -> list[str]:
    return python(*system.worker)


def missing_packages(systems: list[System] | None = None) -> list[str]:
    """The libraries `systems` (by default every one) need, and psutil, not installed."""
    names = [name for system in (SYSTEMS if systems is None else systems)
             for name in system.needs]
    missing = []
    for name in dict.fromkeys([*names, "psutil"]):
        try:
            importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
    return missing


def version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
