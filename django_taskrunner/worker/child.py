"""A child process of `runtasks --processes`: one full worker that reports to its supervisor.

The child is an ordinary `Worker` (its thread pool, its event loop, its consumer name,
its own Redis and database connections, opened here, never inherited). Through a pipe
to the supervisor it says:

- `ready` once it is about to fetch (a replacement is ready: the one it replaces may go);
- `s` before each attempt starts and `e` once it is settled, so that if this process
  dies the supervisor knows which message was running (it counts one attempt) and
  which were only fetched (they go back without one): `worker/reclaim.py`;
- `retire` once, between tasks, when it ran `MAX_TASKS_PER_CHILD` tasks or its resident
  memory passed `MAX_MEMORY_PER_CHILD`: it fetches no more (what it holds still runs),
  the supervisor starts its replacement, and once that one is ready sends this one
  SIGTERM, on which it drains as any worker does;
- `stuck` for a sync task still running `TIME_LIMIT_GRACE` past its time limit: a
  thread cannot be killed, a process can; the supervisor ends this one.
- `terminate` for a sync task cancelled with `cancel(id, terminate=True)`
  (`Attempt.on_terminate`, called by `worker/interrupt.py`): the supervisor ends this
  process, records the task cancelled and hands the other messages back.

The supervisor says one thing back: `adopt`, the messages of a dead sibling it moved to
this child (fetched by the sibling, never started), which this child runs next.

SIGTERM: a graceful stop (a repeated one changes nothing); SIGUSR1, which the supervisor
sends on a second signal, stops waiting for running tasks. SIGINT and SIGHUP are
ignored (`child_boot.py`): they are the supervisor's. When the supervisor
itself dies, the pipe closes and the child drains and exits.
"""

from __future__ import annotations

import logging
import os
import resource
import signal
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from types import FrameType
from typing import Any

from django_taskrunner.store import get_store
from django_taskrunner.store.streams import Broker
from django_taskrunner.worker.interrupt import terminate
from django_taskrunner.worker.reclaim import take_adopted
from django_taskrunner.worker.running import Attempt
from django_taskrunner.worker.settings import WorkerSettings, worker_settings
from django_taskrunner.worker.worker import Worker

logger = logging.getLogger(__name__)

SEPARATOR = "\x1f"  # between the fields of one report (no queue name or stream id has it)


def resident_bytes() -> int:
    """This process's resident memory now (Linux: /proc), else its peak (other systems)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


def encode_report(*fields: object) -> bytes:
    return SEPARATOR.join(str(field) for field in fields).encode()


def decode_report(report: bytes) -> list[str]:
    return report.decode().split(SEPARATOR)


class ParentLink:
    """The child's side of the pipe: reports, the recycling limits, the parent's death."""

    def __init__(self, conn: Connection, worker: Worker, max_tasks: int | None,
                 max_memory_mb: int | None) -> None:
        self.conn, self.worker = conn, worker
        self.max_tasks = max_tasks
        self.max_memory = None if max_memory_mb is None else max_memory_mb * 1024 * 1024
        self._lock = threading.Lock()  # one report at a time: threads share the pipe
        self.finished = 0
        self._retiring = False

    def attach(self) -> None:
        """Hook into the worker: attempts started and settled, tasks stuck past the grace."""
        self.worker.running.on_start(self._started)
        self.worker.running.on_settle(self._settled)
        self.worker.end_process = self._stuck
        threading.Thread(target=self._watch_parent, name="taskrunner-parent", daemon=True
                         ).start()

    def send(self, *fields: object) -> bool:
        """Report to the supervisor; False (and the worker stops) when it is gone."""
        try:
            with self._lock:
                self.conn.send_bytes(encode_report(*fields))
        except (OSError, ValueError):
            self._parent_gone()
            return False
        return True

    def _started(self, attempt: Attempt) -> None:
        if not attempt.coroutine:  # a coroutine is cancelled by the cancel itself
            attempt.on_terminate = lambda: self._terminate(attempt)
        self.send("s", attempt.shard, attempt.stream_id, repr(attempt.started))

    def _terminate(self, attempt: Attempt) -> None:
        """cancel(id, terminate=True): a thread blocked in C cannot be stopped, a process
        can. With no supervisor left, the thread is interrupted as in a single worker."""
        logger.warning("task=%s id=%s queue=%s: cancel(terminate=True); asking the "
                       "supervisor to end this process", attempt.task.name,
                       attempt.message.id, attempt.message.queue)
        if not self.send("terminate", attempt.shard, attempt.stream_id, repr(attempt.started)):
            attempt.on_terminate = None
            terminate(attempt)

    def _settled(self, attempt: Attempt) -> None:
        self.send("e", attempt.shard, attempt.stream_id)
        self.finished += 1
        why = self._past_limit()
        if why is not None and not self._retiring:
            self._retiring = True
            self.worker.paused.set()  # what it holds still runs; nothing more is fetched
            logger.info("worker %s %s: fetching no more; asking for a replacement, then "
                        "draining", self.worker.consumer, why)
            self.send("retire", why)

    def _past_limit(self) -> str | None:
        if self.max_tasks is not None and self.finished >= self.max_tasks:
            return f"ran {self.finished} tasks (max {self.max_tasks} per child)"
        if self.max_memory is None:
            return None
        size = resident_bytes()  # after every task: a read of /proc, about 10 µs
        if size > self.max_memory:
            return (f"uses {size / 2**20:.0f} MB of memory (max "
                    f"{self.max_memory / 2**20:.0f} MB per child)")
        return None

    def _stuck(self, attempt: Attempt) -> bool:
        """A sync task ignored its time limit and the grace: have the supervisor end this
        process (True), or, with no supervisor left, let the worker give up on the thread."""
        logger.error("task=%s id=%s is still running %gs past its time limit: asking the "
                     "supervisor to end this process", attempt.task.name, attempt.message.id,
                     self.worker.settings.time_limit_grace)
        return self.send("stuck", attempt.shard, attempt.stream_id, repr(attempt.started))

    def _watch_parent(self) -> None:
        """Reads the supervisor's orders until the pipe closes: then it is gone."""
        try:
            while True:
                fields = decode_report(self.conn.recv_bytes())
                try:
                    if fields[0] == "adopt":
                        self._adopt(fields[1], fields[2:])
                except Exception:
                    logger.exception("worker %s: could not take messages a dead sibling "
                                     "held; they are reclaimed later", self.worker.consumer)
        except (EOFError, OSError):
            self._parent_gone()

    def _adopt(self, stream: str, pairs: list[str]) -> None:
        """Messages a dead sibling fetched and never started are ours now (the supervisor
        moved them: `adopt.lua`): run them next, as reclaimed ones (their counter kept)."""
        runs = {stream_id: int(count) for stream_id, _, count in
                (pair.rpartition(":") for pair in pairs)}
        take_adopted(self.worker.broker, self.worker, stream, runs)

    def _parent_gone(self) -> None:
        if not self.worker.stopping.is_set():
            logger.warning("worker %s: its supervisor is gone; stopping", self.worker.consumer)
            self.worker.request_stop()


def apply_logging(log: dict[str, Any]) -> None:
    """The supervisor's log levels (and its stderr handler, if it added one)."""
    package, tasks = logging.getLogger(log["package"]), logging.getLogger(log["tasks"])
    package.setLevel(log["package_level"])
    tasks.setLevel(log["tasks_level"])
    if log["handler"] and not (logging.getLogger().handlers or package.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(log["format"]))
        package.addHandler(handler)


def install_signal_handlers(worker: Worker) -> None:
    """SIGTERM: drain (once: a process manager that signals the whole group, systemd's
    default, and the supervisor's own SIGTERM make one drain). SIGUSR1, from the
    supervisor on a second signal: stop waiting for running tasks."""

    def on_term(signum: int, frame: FrameType | None) -> None:
        worker.request_stop()

    def on_force(signum: int, frame: FrameType | None) -> None:
        worker.force_stop()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGUSR1, on_force)


def run_child(spec: dict[str, Any], conn: Connection, stop_at_once: list[int],
              build: Callable[[Broker, WorkerSettings], Worker]) -> int:
    """Run one worker as `spec` says (built by the supervisor; `build` is the runner's
    `build_worker`, which puts the leader's part beside it); returns its exit code.
    `stop_at_once` not empty: a SIGTERM came while it started (it then fetches nothing)."""
    apply_logging(spec["log"])
    settings = worker_settings(spec["queues"], consumer=spec["consumer"], **spec["worker"])
    worker = build(get_store().streams, settings)
    install_signal_handlers(worker)
    if stop_at_once:
        return 0
    link = ParentLink(conn, worker, spec["max_tasks"], spec["max_memory_mb"])
    link.attach()
    if not link.send("ready", os.getpid(), resident_bytes()):
        return 1
    return worker.run()
