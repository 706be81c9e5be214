"""The entry point of a child process of `runtasks --processes` (`multiprocessing`, spawn).

The supervisor starts each child with the *spawn* start method: a fresh interpreter that
imports the project's code anew (so SIGHUP's replacements run the code deployed since),
inherits no socket, thread or lock of the parent, and behaves the same on every Python
(3.14 made `forkserver` the default on Linux; we never rely on the default). This module
is imported by `multiprocessing` before Django is set up, so it imports nothing that
needs the app registry until `main()` has called `django.setup()`.
"""

from __future__ import annotations

import signal
import sys
from multiprocessing.connection import Connection
from typing import Any

import django


def main(spec: dict[str, Any], conn: Connection) -> None:
    """Set Django up, then run one worker until it stops; exit with its code."""
    # The terminal's Ctrl+C reaches the whole process group: the supervisor alone
    # answers it (and tells each child with SIGTERM). SIGHUP is the supervisor's too.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # A SIGTERM while starting: stop as soon as set up, with nothing fetched (exit 0).
    early: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: early.append(signum))
    signal.signal(signal.SIGUSR1, lambda signum, frame: early.append(signum))
    django.setup()
    from django_taskrunner.runner import build_worker
    from django_taskrunner.worker.child import run_child

    sys.exit(run_child(spec, conn, stop_at_once=early, build=build_worker))
