"""`manage.py runtasks`: argparse glue that builds and runs a `Worker`."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_taskrunner.checks import MAX_BATCH, MAX_POOL
from django_taskrunner.conf import Settings, get_settings
from django_taskrunner.core.options import check_queue_name
from django_taskrunner.core.registry import registry
from django_taskrunner.exceptions import InvalidTaskOptions
from django_taskrunner.stats.metrics import serve_metrics
from django_taskrunner.store.broker import get_broker
from django_taskrunner.store.errors import REDIS_DOWN
from django_taskrunner.store.server import ServerUnsupported, check_server
from django_taskrunner.worker.autoscale import ScalingPolicy, default_tolerance
from django_taskrunner.worker.outage import backoff
from django_taskrunner.worker.worker import Worker

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def positive_int(value: str) -> int:
    """argparse type: an integer >= 1 ("nan", "inf" and "1e3" are not integers)."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {number}")
    return number


def int_up_to(maximum: int) -> Callable[[str], int]:
    """argparse type: an integer from 1 to `maximum`, the range of the matching setting."""

    def parse(value: str) -> int:
        number = positive_int(value)
        if number > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum}, not {number}")
        return number

    parse.__name__ = f"integer from 1 to {maximum}"  # what argparse names in its errors
    return parse


def queue_name(value: str) -> str:
    """argparse type: a valid queue name."""
    try:
        return check_queue_name(value)
    except InvalidTaskOptions as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


port_number = int_up_to(65535)  # argparse type: a TCP port
pool_size = int_up_to(MAX_POOL)  # as MIN_WORKERS and MAX_WORKERS
batch_size = int_up_to(MAX_BATCH)  # as BATCH_SIZE


def pool_sizing(options: dict[str, Any], settings: Settings) -> tuple[int, ScalingPolicy | None]:
    """(initial pool size, scaling policy or None for a fixed pool) from options + settings.

    `--concurrency` is a fixed pool. Otherwise the pool autoscales when a smallest size is
    known (`--min-workers` or MIN_WORKERS), up to `--max-workers` or MAX_WORKERS.
    """
    fixed, smallest, largest = (options.get(name) for name in
                                ("concurrency", "min_workers", "max_workers"))
    if fixed is not None:
        if smallest is not None or largest is not None:
            raise CommandError("--concurrency sets a fixed pool; give it or "
                               "--min-workers/--max-workers, not both")
        return fixed, None
    largest = settings.MAX_WORKERS if largest is None else largest
    smallest = settings.MIN_WORKERS if smallest is None else smallest
    if smallest is None:
        return largest, None
    if smallest > largest:
        raise CommandError(f"the smallest pool ({smallest}, --min-workers or MIN_WORKERS) is "
                           f"larger than the largest ({largest}, --max-workers or MAX_WORKERS)")
    return smallest, ScalingPolicy(
        min_workers=smallest, max_workers=largest, desired_wait=settings.DESIRED_WAIT,
        tolerance=default_tolerance(settings.DESIRED_WAIT, settings.DESIRED_WAIT_TOLERANCE),
        cooldown=settings.TUNING_COOLDOWN,
    )


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
        parser.add_argument("--concurrency", "-c", type=pool_size,
                            help="worker threads of a fixed pool (default: "
                                 "TASKRUNNER['MAX_WORKERS'])")
        parser.add_argument("--min-workers", type=pool_size,
                            help="autoscale the pool from this many threads (default: "
                                 "TASKRUNNER['MIN_WORKERS'])")
        parser.add_argument("--max-workers", type=pool_size,
                            help="largest autoscaled pool (default: TASKRUNNER['MAX_WORKERS'])")
        parser.add_argument("--metrics-port", type=port_number,
                            help="serve Prometheus metrics on this port (needs the "
                                 "'prometheus' extra)")
        parser.add_argument("--metrics-addr", default="127.0.0.1",
                            help="address the metrics server binds (default: 127.0.0.1)")
        parser.add_argument("--batch-size", type=batch_size,
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
        broker = self._connect(wait=not options["burst"])
        size, scaling = pool_sizing(options, settings)
        worker = Worker(
            broker, queues,
            concurrency=size, scaling=scaling,
            batch_size=options["batch_size"] or settings.BATCH_SIZE,
            block_ms=settings.BLOCK_MS,
            shutdown_timeout=settings.SHUTDOWN_TIMEOUT,
            consumer=options["consumer_name"],
            burst=options["burst"],
            scheduler=not options["no_scheduler"],
            leader_lease=settings.LEADER_LEASE,
        )
        stop_metrics = self._serve_metrics(options["metrics_port"], options["metrics_addr"])
        previous = self._install_signal_handlers(worker)
        try:
            code = worker.run()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            stop_metrics()
        if code:
            sys.exit(code)

    @staticmethod
    def _serve_metrics(port: int | None, addr: str) -> Any:
        """Start the Prometheus endpoint if asked; returns the function that stops it."""
        if port is None:
            return lambda: None
        from django.core.exceptions import ImproperlyConfigured

        try:
            return serve_metrics(port, addr)
        except (ImproperlyConfigured, OSError) as exc:
            raise CommandError(f"cannot serve metrics on {addr}:{port}: {exc}") from exc

    @staticmethod
    def _connect(wait: bool) -> Any:
        """The broker. While Redis cannot be reached a worker waits for it (one started
        before its Redis, or during an outage, starts once Redis is up) instead of exiting;
        `--burst`, meant for scripts, fails at once with a clear error instead."""
        failures = 0
        while True:
            try:
                broker = get_broker()
                check_server(broker.client, broker.prefix)
                return broker
            except ServerUnsupported as exc:
                raise CommandError(str(exc)) from exc
            except REDIS_DOWN as exc:
                if not wait:
                    raise CommandError(f"cannot connect to Redis: {exc}") from exc
                failures += 1
                if failures == 1:
                    logging.getLogger("django_taskrunner.worker.worker").error(
                        "Redis is unreachable (%s); waiting for it", exc)
                time.sleep(backoff(failures))
            except Exception as exc:  # a configuration error: say what to fix
                raise CommandError(f"cannot connect to Redis: {exc}") from exc

    @staticmethod
    def _default_queues(default_queue: str) -> list[str]:
        """Queues that registered tasks name, DEFAULT_QUEUE, and the QUEUES of every
        Django Tasks framework backend of ours in TASKS."""
        from django.conf import settings

        queues = registry.queues() | {default_queue}
        for params in getattr(settings, "TASKS", {}).values():
            if params.get("BACKEND") == "django_taskrunner.backends.TaskRunnerBackend":
                queues |= set(params.get("QUEUES", ["default"]))
        return sorted(queues)

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
