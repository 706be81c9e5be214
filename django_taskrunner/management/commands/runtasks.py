"""`manage.py runtasks`: argparse glue that builds and runs a `Worker`."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_taskrunner.broker import get_broker
from django_taskrunner.conf import get_settings
from django_taskrunner.task import check_queue_name
from django_taskrunner.exceptions import InvalidTaskOptions
from django_taskrunner.worker import Worker

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def positive_int(value: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {number}")
    return number


def queue_name(value: str) -> str:
    """argparse type: a valid queue name."""
    try:
        return check_queue_name(value)
    except InvalidTaskOptions as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def consumer_name(value: str) -> str:
    """argparse type: a consumer name of printable characters, at most 200."""
    if not value or len(value) > 200 or not value.isprintable() or " " in value:
        raise argparse.ArgumentTypeError("must be 1-200 printable characters without spaces")
    return value


class Command(BaseCommand):
    help = "Run background tasks from the Redis streams of the given queues."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--queue", "-Q", action="append", type=queue_name, dest="queues",
                            help="queue to consume (repeatable; default: every queue a "
                                 "registered task names, plus DEFAULT_QUEUE)")
        parser.add_argument("--concurrency", "-c", type=positive_int,
                            help="worker threads (default: TASKRUNNER['MAX_WORKERS'])")
        parser.add_argument("--batch-size", type=positive_int,
                            help="messages per read (default: TASKRUNNER['BATCH_SIZE'])")
        parser.add_argument("--consumer-name", type=consumer_name,
                            help="name in the consumer group (default: host-pid-random)")
        parser.add_argument("--burst", action="store_true",
                            help="process every task that is ready, then exit 0")
        parser.add_argument("--no-scheduler", action="store_true",
                            help="never lead: leave moving delayed tasks and firing periodic "
                                 "ones to other workers")
        parser.add_argument("--log-level", choices=LOG_LEVELS, type=str.upper,
                            help="log level of the django_taskrunner loggers (default: INFO)")

    def handle(self, *args: Any, **options: Any) -> None:
        settings = get_settings()
        self._configure_logging(options["log_level"] or "INFO")
        queues = options["queues"] or self._default_queues(settings.DEFAULT_QUEUE)
        try:
            broker = get_broker()
        except Exception as exc:  # the connection error says what to fix
            raise CommandError(f"cannot connect to Redis: {exc}") from exc
        worker = Worker(
            broker, queues,
            concurrency=options["concurrency"] or settings.MAX_WORKERS,
            batch_size=options["batch_size"] or settings.BATCH_SIZE,
            block_ms=settings.BLOCK_MS,
            shutdown_timeout=settings.SHUTDOWN_TIMEOUT,
            consumer=options["consumer_name"],
            burst=options["burst"],
            scheduler=not options["no_scheduler"],
            leader_lease=settings.LEADER_LEASE,
        )
        previous = self._install_signal_handlers(worker)
        try:
            code = worker.run()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        if code:
            sys.exit(code)

    @staticmethod
    def _default_queues(default_queue: str) -> list[str]:
        from django_taskrunner.registry import registry

        return sorted(registry.queues() | {default_queue})

    @staticmethod
    def _configure_logging(level: str) -> None:
        logger = logging.getLogger("django_taskrunner")
        logger.setLevel(level)
        if not logging.getLogger().handlers and not logger.handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter(
                "%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s"))
            logger.addHandler(handler)

    @staticmethod
    def _install_signal_handlers(worker: Worker) -> dict[int, Any]:
        """First SIGTERM/SIGINT: graceful stop. A second one: stop waiting for tasks.

        Returns the handlers it replaced, to restore when the worker ends.
        """
        if threading.current_thread() is not threading.main_thread():
            return {}  # call_command from a thread (tests): the caller stops the worker

        def on_signal(signum: int, frame: FrameType | None) -> None:
            if worker.stopping.is_set():
                worker.force_stop()
            else:
                worker.request_stop()

        return {signum: signal.signal(signum, on_signal)
                for signum in (signal.SIGTERM, signal.SIGINT)}
