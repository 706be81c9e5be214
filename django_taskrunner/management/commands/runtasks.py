"""`manage.py runtasks`: argparse glue that builds a worker (`runner.build_worker`) and runs it."""

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

from django_taskrunner.conf import (
    MAX_BATCH,
    MAX_MEMORY_MB,
    MAX_POOL,
    MAX_PROCESSES,
    MAX_TASKS_PER_CHILD,
    PREFETCH_MS_MAX,
    QUEUE_NAME,
    get_settings,
)
from django_taskrunner.core import clock
from django_taskrunner.core.options import check_queue_name
from django_taskrunner.exceptions import InvalidTaskOptions
from django_taskrunner.runner import build_worker
from django_taskrunner.scheduling.scheduler import forget_after_ms
from django_taskrunner.shim import quiet_framework_logs
from django_taskrunner.stats.figures import declared_queues
from django_taskrunner.stats.metrics import serve_metrics
from django_taskrunner.store import get_store
from django_taskrunner.store.errors import REDIS_DOWN
from django_taskrunner.store.server import ServerUnsupported
from django_taskrunner.store.streams import Broker
from django_taskrunner.worker.outage import RedisStatus, redis_call
from django_taskrunner.worker.settings import (
    PoolSizeConflict,
    WorkerSettings,
    default_consumer_name,
    worker_settings,
)
from django_taskrunner.worker.supervisor import (
    ChildrenFailing,
    ProcessPlan,
    Supervisor,
    SupervisorOptions,
    process_plan,
)
from django_taskrunner.worker.worker import Worker

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

logger = logging.getLogger(__name__)


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


def processes_option(value: str) -> int | str:
    """argparse type: "auto" or a number of processes from 1 to 1024 (as PROCESSES)."""
    if value.strip().lower() == "auto":
        return "auto"
    return int_up_to(MAX_PROCESSES)(value)


def queue_name(value: str) -> str:
    """argparse type: a valid queue name."""
    try:
        return check_queue_name(value)
    except InvalidTaskOptions as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


MAX_WEIGHT = 100


def queue_spec(value: str) -> tuple[str, int | None]:
    """argparse type: `queue` or `queue:weight` (1..100), for `--queue`."""
    name, sep, weight = value.partition(":")
    queue = queue_name(name)
    if not sep:
        return queue, None
    if not weight.isdigit() or not 1 <= int(weight) <= MAX_WEIGHT:
        raise argparse.ArgumentTypeError(
            f"the weight of queue {queue!r} must be an integer from 1 to {MAX_WEIGHT}, "
            f"not {weight!r}")
    return queue, int(weight)


def queue_order(specs: list[tuple[str, int | None]]) -> tuple[tuple[str, int], ...] | None:
    """The worker's `queue_order` from the `--queue` options: None for one queue (or
    none); every weight 0 (a strict order) when none has a weight; else a missing weight
    counts 1. A queue named twice keeps its first place."""
    order = dict[str, int | None]()
    for queue, weight in specs:
        order.setdefault(queue, weight)
    if len(order) < 2:
        return None
    if all(weight is None for weight in order.values()):
        return tuple((queue, 0) for queue in order)
    return tuple((queue, 1 if weight is None else weight) for queue, weight in order.items())


port_number = int_up_to(65535)  # argparse type: a TCP port
pool_size = int_up_to(MAX_POOL)  # as MIN_WORKERS and MAX_WORKERS
batch_size = int_up_to(MAX_BATCH)  # as BATCH_SIZE


def prefetch_ms(value: str) -> int:
    """argparse type: milliseconds from 0 to 60,000, the range of PREFETCH_MS."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if not 0 <= number <= PREFETCH_MS_MAX:
        raise argparse.ArgumentTypeError(f"must be from 0 to {PREFETCH_MS_MAX}, not {number}")
    return number


def consumer_name(value: str) -> str:
    """argparse type: a consumer name of printable characters, at most 200."""
    if not value or len(value) > 200 or not value.isprintable() or " " in value:
        raise argparse.ArgumentTypeError("must be 1-200 printable characters without spaces")
    return value


PACKAGE_LOGGER = "django_taskrunner"
TASKS_LOGGER = "django_taskrunner.tasks"  # one INFO line per finished attempt
LOG_FORMAT = "%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s"


def configure_logging(verbosity: int, log_level: str | None) -> Callable[[], None]:
    """Set the package's log levels for this run; returns what puts them back.

    The project's LOGGING comes first: a level it set on `django_taskrunner` (or on
    `django_taskrunner.tasks`) is kept unless an option asks otherwise: `--log-level`
    sets the package's level, `-v 0` raises it to WARNING at least, `-v 3` lowers it to
    DEBUG. Unset, it is INFO. The per-task lines (`django_taskrunner.tasks`, INFO) show at
    `-v 2` and more, or when LOGGING gives that logger a level. A handler (stderr) is
    added only when neither the package's loggers nor the root logger have one.
    """
    package, tasks = logging.getLogger(PACKAGE_LOGGER), logging.getLogger(TASKS_LOGGER)
    saved = [(package, package.level), (tasks, tasks.level)]
    if log_level is not None:
        package.setLevel(log_level)
    elif verbosity == 0:
        package.setLevel(max(package.level, logging.WARNING))
    elif verbosity >= 3:
        package.setLevel(logging.DEBUG)
    elif package.level == logging.NOTSET:
        package.setLevel(logging.INFO)
    if verbosity >= 2:
        tasks.setLevel(min(tasks.level or logging.INFO, logging.INFO))
    elif tasks.level == logging.NOTSET and package.getEffectiveLevel() > logging.DEBUG:
        # Off at -v 1 unless LOGGING or DEBUG asks for them.
        tasks.setLevel(max(logging.WARNING, package.getEffectiveLevel()))
    handler = None
    if not (logging.getLogger().handlers or package.handlers or tasks.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        package.addHandler(handler)

    def restore() -> None:
        for logger, level in saved:
            logger.setLevel(level)
        if handler is not None:
            package.removeHandler(handler)

    return restore


class Command(BaseCommand):
    help = "Run background tasks from the Redis streams of the given queues."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--queue", "-Q", action="append", type=queue_spec, dest="queues",
                            help="queue to consume, or queue:weight (repeatable: read in the "
                                 "order given, or a weighted round robin with weights; "
                                 "default: every queue a registered task or TASKS names, "
                                 "DEFAULT_QUEUE, and the queues known in Redis, side by side)")
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
        parser.add_argument("--prefetch-ms", type=prefetch_ms,
                            help="milliseconds of short tasks a read may grow to hold, up to "
                                 "100 messages; 0: every read is --batch-size (default: "
                                 "TASKRUNNER['PREFETCH_MS'])")
        parser.add_argument("--consumer-name", type=consumer_name,
                            help="name in the consumer group (default: host-pid-random)")
        parser.add_argument("--burst", action="store_true",
                            help="process every task that is ready, then exit 0")
        parser.add_argument("--no-scheduler", action="store_true",
                            help="never lead: leave moving delayed tasks and firing periodic "
                                 "ones to other workers")
        _add_process_arguments(parser)
        parser.add_argument("--log-level", choices=LOG_LEVELS, type=str.upper,
                            help="log level of the django_taskrunner loggers (default: the "
                                 "level LOGGING sets, else INFO; WARNING at -v 0)")

    def handle(self, *args: Any, **options: Any) -> None:
        settings = get_settings()
        try:  # bad --processes / child limits: an error before anything starts
            plan = process_plan(options.get("processes"), options.get("max_tasks_per_child"),
                                options.get("max_memory_per_child"), settings)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        restore_logging = configure_logging(options["verbosity"], options["log_level"])
        restore_framework_logs = quiet_framework_logs(options["verbosity"])
        if settings.EAGER:
            logger.warning("TASKRUNNER['EAGER'] is on: dispatches run at once in the process "
                           "that makes them and reach no queue; this worker runs what is "
                           "on its queues already, and runs inline what its tasks dispatch")
        try:
            if plan is None:  # one process, no child limit: today's worker, no supervisor
                self._run(settings, options)
            else:
                self._supervise(settings, options, plan)
        finally:
            restore_framework_logs()
            restore_logging()

    def _supervise(self, settings: Any, options: dict[str, Any], plan: ProcessPlan) -> None:
        """`--processes`: a supervisor and its worker processes (worker/supervisor.py)."""
        specs = options["queues"] or []
        worker = {"concurrency": options.get("concurrency"),
                  "min_workers": options.get("min_workers"),
                  "max_workers": options.get("max_workers"),
                  "batch_size": options.get("batch_size"),
                  "prefetch_ms": options.get("prefetch_ms"), "burst": options.get("burst"),
                  "queue_order": queue_order(specs)}
        broker = self._connect(wait=not options["burst"])
        queues = ([queue for queue, _weight in specs]
                  or self._default_queues(settings.DEFAULT_QUEUE, broker))
        self._worker_settings(queues, options, worker["queue_order"])  # refuse bad pools now
        package = logging.getLogger(PACKAGE_LOGGER)
        supervisor = Supervisor(broker, SupervisorOptions(
            processes=plan.processes, name=options.get("consumer_name") or default_consumer_name(),
            queues=tuple(queues), worker=worker,
            scheduler=not options.get("no_scheduler") and not options.get("burst"),
            log={"package": PACKAGE_LOGGER, "tasks": TASKS_LOGGER, "format": LOG_FORMAT,
                 "package_level": package.level,
                 "tasks_level": logging.getLogger(TASKS_LOGGER).level,
                 "handler": bool(package.handlers)},
            max_tasks=plan.max_tasks, max_memory_mb=plan.max_memory_mb,
            time_limit_grace=settings.TIME_LIMIT_GRACE))
        stop_metrics = self._serve_metrics(options["metrics_port"], options["metrics_addr"])
        try:
            code = supervisor.run()
        except ChildrenFailing as exc:
            raise CommandError(str(exc)) from None
        finally:
            stop_metrics()
        if code:
            sys.exit(code)

    def _run(self, settings: Any, options: dict[str, Any]) -> None:
        broker = self._connect(wait=not options["burst"])
        specs = options["queues"] or []
        queues = ([queue for queue, _weight in specs]
                  or self._default_queues(settings.DEFAULT_QUEUE, broker))
        worker = build_worker(broker, self._worker_settings(queues, options, queue_order(specs)))
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
    def _worker_settings(queues: list[str], options: dict[str, Any],
                         order: tuple[tuple[str, int], ...] | None = None) -> WorkerSettings:
        """The worker's settings: these options over TASKRUNNER over the defaults."""
        try:
            return worker_settings(
                queues, concurrency=options.get("concurrency"),
                min_workers=options.get("min_workers"), max_workers=options.get("max_workers"),
                batch_size=options.get("batch_size"), prefetch_ms=options.get("prefetch_ms"),
                consumer=options.get("consumer_name"),
                burst=options.get("burst"), scheduler=not options.get("no_scheduler"),
                queue_order=order,
            )
        except PoolSizeConflict as exc:
            raise CommandError(str(exc)) from None

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
    def _connect(wait: bool) -> Broker:
        """The broker. While Redis cannot be reached a worker waits for it (one started
        before its Redis, or during an outage, starts once Redis is up) instead of exiting;
        `--burst`, meant for scripts, fails at once with a clear error instead."""

        def sleep(seconds: float, _failures: int) -> bool:
            time.sleep(seconds)
            return False  # never gives up

        def connect() -> Broker:
            broker = get_store().streams
            broker.store.server.check()  # too old or not Redis: say so now
            return broker

        try:
            if not wait:
                return connect()
            broker = redis_call(connect, status=RedisStatus(meanwhile="waiting for it"),
                                doing="starting the worker", wait=sleep)
        except ServerUnsupported as exc:
            raise CommandError(str(exc)) from exc
        except Exception as exc:  # Redis down in burst mode, or a configuration error
            raise CommandError(f"cannot connect to Redis: {exc}") from exc
        assert broker is not None  # redis_call gives up only when `wait` does
        return broker

    @staticmethod
    def _default_queues(default_queue: str, broker: Broker) -> list[str]:
        """Queues that registered tasks name, DEFAULT_QUEUE, the QUEUES of every Django
        Tasks framework backend of ours in TASKS, and the queues dispatches used in the
        last `QUEUE_FORGET_AFTER` seconds (`dispatch(queue=...)` included; 0: ever). Not
        every queue ever seen: one only a worker's mistyped `-Q` named is not consumed.
        When Redis does not answer, the configured ones alone, and a log line says so."""
        queues = declared_queues() | {default_queue}
        try:
            store = broker.store.schedule
            window = forget_after_ms()
            used = store.used_queues(clock.now_ms() - window if window > 0 else 0)
        except REDIS_DOWN as exc:
            logger.warning("cannot read the known queues from Redis (%s): consuming the "
                           "queues registered tasks and TASKS name: %s", exc,
                           ", ".join(sorted(queues)))
            return sorted(queues)
        return sorted(queues | {name for name in used if QUEUE_NAME.fullmatch(name)})

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


def _add_process_arguments(parser: argparse.ArgumentParser) -> None:
    """`--processes` and the child limits (worker/supervisor.py)."""
    parser.add_argument("--processes", "-P", type=processes_option,
                        help="worker processes, each with its own pool of threads, under "
                             "one supervisor; 'auto': one per CPU (default: "
                             "TASKRUNNER['PROCESSES'], 1: a single process)")
    parser.add_argument("--max-tasks-per-child", type=int_up_to(MAX_TASKS_PER_CHILD),
                        help="replace a worker process after it ran this many tasks "
                             "(default: TASKRUNNER['MAX_TASKS_PER_CHILD'])")
    parser.add_argument("--max-memory-per-child", type=int_up_to(MAX_MEMORY_MB),
                        metavar="MB",
                        help="replace a worker process whose resident memory passed this "
                             "many megabytes, checked between tasks (default: "
                             "TASKRUNNER['MAX_MEMORY_PER_CHILD'])")
