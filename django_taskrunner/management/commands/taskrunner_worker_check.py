"""`manage.py taskrunner_worker_check`: a container or service healthcheck for workers.

Exits 0 when a worker of this host (a consumer named `<hostname>-...`, as `runtasks`
names itself) has a fresh heartbeat on one of the queues, 1 when none has (the worker
is dead, stuck or not started yet), 2 when Redis cannot be reached. It reads what the
queues dashboard reads: each queue's live workers, which a worker renews while it runs.
"""

from __future__ import annotations

import argparse
import socket
from typing import Any

from django.core.management.base import BaseCommand

from django_taskrunner.core import clock
from django_taskrunner.stats.figures import dashboard_queues
from django_taskrunner.store import get_store
from django_taskrunner.store.errors import REDIS_DOWN

NOT_ALIVE = 1
UNREACHABLE = 2


def live_workers(host: str) -> list[str]:
    """The live workers, on any queue, whose name says they run on `host`."""
    broker = get_store().streams
    inspector = broker.store.inspect
    now_ms = clock.now_ms()
    found: set[str] = set()
    for queue in dashboard_queues(broker):
        found.update(name for name in inspector.consumers(queue, now_ms)[1]
                     if name.startswith(f"{host}-"))
    return sorted(found)


class Command(BaseCommand):
    help = ("Exit 0 when a worker (runtasks) of this host has a fresh heartbeat, 1 when "
            "none has, 2 when Redis cannot be reached: a healthcheck for worker containers.")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--host", default=None,
                            help="the host whose workers count (default: this one's name)")

    def handle(self, *args: Any, **options: Any) -> None:
        host = options["host"] or socket.gethostname()
        try:
            alive = live_workers(host)
        except REDIS_DOWN as exc:
            self.stderr.write(f"cannot reach Redis: {exc}")
            raise SystemExit(UNREACHABLE) from exc
        if not alive:
            self.stderr.write(f"no live worker on host {host}")
            raise SystemExit(NOT_ALIVE)
        self.stdout.write(f"alive: {', '.join(alive)}")
