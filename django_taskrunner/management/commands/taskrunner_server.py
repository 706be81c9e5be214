"""`manage.py taskrunner_server status|start|stop`: see, start or stop the embedded Redis.

The embedded server outlives the process that started it (the web process and every
worker share it), so something must be able to show it and stop it: this command, which
scripts use too (`status` exits 3 when the server is not running, as an init script would).
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_taskrunner.conf import get_settings
from django_taskrunner.exceptions import EmbeddedRedisUnavailable
from django_taskrunner.store import embedded
from django_taskrunner.store.connection import _safe

NOT_RUNNING = 3  # the LSB status code for "program is not running"


def configured_server() -> str | None:
    """What the site uses instead of the embedded server, or None when it uses it."""
    settings = get_settings()
    if settings.CLUSTER_NODES:
        return "the Redis Cluster of CLUSTER_NODES"
    if settings.CONNECTION:
        return f"the django-redis cache {settings.CONNECTION!r} (CONNECTION)"
    if settings.REDIS_URL:
        return f"the Redis at {_safe(settings.REDIS_URL)} (REDIS_URL)"
    return None


class Command(BaseCommand):
    help = ("Show (status), start or stop the embedded Redis the site uses when no REDIS_URL, "
            "CONNECTION or CLUSTER_NODES is set. status exits 3 when it is not running.")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("action", choices=("status", "start", "stop"))

    def handle(self, *args: Any, **options: Any) -> None:
        other = configured_server()
        action = options["action"]
        if other is not None:
            if action != "status":
                raise CommandError(f"this site uses {other}, not the embedded Redis: "
                                   f"there is nothing to {action} here")
            self.stdout.write(f"embedded Redis: not used; this site uses {other}")
            return
        data_dir = get_settings().EMBEDDED_DIR
        try:
            getattr(self, action)(data_dir)
        except EmbeddedRedisUnavailable as exc:
            raise CommandError(str(exc)) from exc

    def status(self, data_dir: Any) -> None:
        found = embedded.server_status(data_dir)
        state = {"up": "running", "loading": "running (loading its data)",
                 "down": "not running"}[found.state]
        pid = f" (pid {found.pid})" if found.pid is not None else ""
        self.stdout.write(f"embedded Redis: {state}{pid}\n"
                          f"  data dir: {found.data_dir}\n  socket:   {found.socket}")
        if not found.running:
            raise SystemExit(NOT_RUNNING)

    def start(self, data_dir: Any) -> None:
        was_running = embedded.server_status(data_dir).running
        embedded.ensure_server(data_dir)
        found = embedded.server_status(data_dir)
        self.stdout.write(f"embedded Redis: {'already running' if was_running else 'started'}"
                          f" (pid {found.pid}), data in {found.data_dir}")

    def stop(self, data_dir: Any) -> None:
        if embedded.stop_server(data_dir):
            self.stdout.write(f"embedded Redis: stopped, data kept in {data_dir}")
        else:
            self.stdout.write(f"embedded Redis: was not running (data dir {data_dir})")
