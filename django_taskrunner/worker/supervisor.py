"""The supervisor of `runtasks --processes N`: starts N worker processes, watches them,
replaces them. It owns no task itself.

Each child is a full worker (`worker/child.py`) started with the *spawn* start method
(`child_boot.py` says why), with its own consumer name, `<name>-<index>.<generation>`:
the name of this `runtasks` (`--consumer-name`, else host-pid-random), the child's slot
and how many children that slot has had. Child 0 (of any generation) stands for leader
election, so one `runtasks` runs at most one scheduler and one outbox flusher; the others
only run tasks. Figures come from Redis, so the supervisor serves the one Prometheus
endpoint of the whole `runtasks` (`--metrics-port`).

- A child that dies is replaced at once, and the messages it held are handed back before
  its replacement is started (`reclaim.py`, the hand-back): fetched ones unchanged, the running ones
  as a failed attempt (`WorkerLost`, naming the signal or exit code).
- A child that comes back after being declared lost (`lost_workers.py`) exits with
  `LOST_EXIT`: it is replaced as one that died, under a new consumer name.
- A child that dies before it is ready `MAX_STARTUP_FAILURES` times in a row (an import
  error, a bad setting) stops the supervisor with an error, rather than a crash loop.
- Recycling: a child past `MAX_TASKS_PER_CHILD` or `MAX_MEMORY_PER_CHILD` asks for a
  replacement; once that one is ready the old one gets SIGTERM and drains.
- Hard time limit: a child with a sync task stuck `TIME_LIMIT_GRACE` past its
  `time_limit` is ended (SIGKILL); that attempt fails with `TimeLimitExceeded`, its
  other messages go back without an attempt.
- `cancel(id, terminate=True)` of a sync task in a child: the child asks to be ended
  (SIGKILL); that task is recorded cancelled (not retried, its lock freed), its other
  messages go back without an attempt.
- SIGTERM/SIGINT: every child drains (SIGTERM; a child that got one from a process
  manager signalling the whole group drains once all the same); a second signal tells
  them to stop waiting (SIGUSR1). The exit code is 0 only when every child drained.
- SIGHUP: children are replaced one at a time, each by a fresh one started first (freshly
  imported code: a deploy without a gap).
- `--burst`: each child drains what is ready and exits 0; the supervisor exits once all
  have (a child that crashed is replaced first).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any

from django_taskrunner.core import clock
from django_taskrunner.store.errors import REDIS_DOWN
from django_taskrunner.store.streams import Broker
from django_taskrunner.worker import child_boot
from django_taskrunner.worker.child import decode_report, encode_report, resident_bytes
from django_taskrunner.worker.lost_workers import LOST_EXIT
from django_taskrunner.worker.reclaim import Started, hand_back

logger = logging.getLogger(__name__)

START_METHOD = "spawn"  # fresh code for SIGHUP, no inherited sockets: child_boot.py
MAX_STARTUP_FAILURES = 3  # in a row, in one slot: then the supervisor stops
TICK_SECONDS = 0.25  # the longest the loop sleeps: signals and retries are seen this often
LEADER_SLOT = 0


@dataclass(frozen=True)
class ProcessPlan:
    """How many worker processes, and when each is replaced."""

    processes: int
    max_tasks: int | None = None
    max_memory_mb: int | None = None


def cpu_count() -> int | None:
    """The CPUs this process may run on (taskset, cgroups' cpusets), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def process_plan(processes: int | str | None, max_tasks: int | None,
                 max_memory_mb: int | None, settings: Any) -> ProcessPlan | None:
    """The options over PROCESSES, MAX_TASKS_PER_CHILD and MAX_MEMORY_PER_CHILD; None for
    one process with no child limit (today's worker, no supervisor, no cost).

    Raises:
        ValueError: "auto" on a machine whose CPU count is unknown, or a memory limit
            a child would pass as soon as it started.
    """
    processes = settings.PROCESSES if processes is None else processes
    max_tasks = settings.MAX_TASKS_PER_CHILD if max_tasks is None else max_tasks
    max_memory_mb = settings.MAX_MEMORY_PER_CHILD if max_memory_mb is None else max_memory_mb
    if processes == "auto":
        count = cpu_count()
        if not count:
            raise ValueError("--processes auto: the number of CPUs of this machine is unknown; "
                             "give a number of processes")
        processes = count
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise ValueError(f"--processes must be 'auto' or at least 1, not {processes!r}")
    if max_memory_mb is not None:
        size = resident_bytes()  # a child imports what this process did: about its size
        if max_memory_mb * 2**20 <= size:
            raise ValueError(
                f"--max-memory-per-child {max_memory_mb} MB is below the size a worker process "
                f"starts at (about {size / 2**20:.0f} MB here): every child would be replaced "
                f"as soon as it ran a task")
    if processes == 1 and max_tasks is None and max_memory_mb is None:
        return None
    return ProcessPlan(processes, max_tasks, max_memory_mb)


class ChildrenFailing(RuntimeError):
    """Children keep dying before they are ready: the supervisor gave up."""


@dataclass(frozen=True)
class SupervisorOptions:
    """What the supervisor is told (built by `runtasks`)."""

    processes: int
    name: str  # of this runtasks; children are <name>-<slot>.<generation>
    queues: tuple[str, ...]
    worker: dict[str, Any]  # worker_settings() keywords, but consumer and scheduler
    scheduler: bool  # whether slot 0 stands for election (False: --no-scheduler, --burst)
    log: dict[str, Any]  # the log levels the children take (child.apply_logging)
    max_tasks: int | None = None
    max_memory_mb: int | None = None
    time_limit_grace: float = 5.0


@dataclass(eq=False)
class Child:
    """One child process and what the supervisor knows of it."""

    slot: int
    generation: int
    consumer: str
    process: BaseProcess
    conn: Connection | None
    started: dict[tuple[str, str], Started] = field(default_factory=dict)
    ready: bool = False
    retiring: bool = False  # a replacement was started for it; SIGTERM once that is ready
    replaces: Child | None = None  # the retiring child it takes over from
    stuck: tuple[str, str] | None = None  # the attempt it was ended for (time limit)
    cancelled: tuple[str, str] | None = None  # ...or for cancel(id, terminate=True)
    pid: int = 0
    born: float = field(default_factory=clock.monotonic)
    terminated: bool = False  # sent SIGTERM: it drains
    aborted: bool = False  # ended by the supervisor's stop before it was ready

    def describe(self) -> str:
        return f"child {self.slot} (pid {self.pid}, consumer {self.consumer})"


def exit_cause(code: int | None) -> str:
    """'killed by signal 9 (SIGKILL)' or 'exited with code 3'."""
    if code is None:
        return "ended"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown signal"
        return f"killed by signal {-code} ({name})"
    if code == LOST_EXIT:
        return (f"exited with code {code}: it was declared lost (WORKER_LOST_AFTER) and its "
                f"messages were taken by other workers")
    return f"exited with code {code}"


class Supervisor:
    """Runs `options.processes` children until stopped (see the module docstring)."""

    def __init__(self, broker: Broker, options: SupervisorOptions) -> None:
        self.broker, self.options = broker, options
        self.context = multiprocessing.get_context(START_METHOD)
        self.children: list[Child] = []
        self.generations = [0] * options.processes
        self.failures = [0] * options.processes  # start-up deaths in a row, per slot
        self.signals: list[int] = []
        self.stopping = self.forced = False
        self.rolling: list[int] = []  # SIGHUP: slots still to replace, one at a time
        self.unclean: list[str] = []  # children that did not drain (during the stop)
        self.handbacks: list[tuple[Child, str]] = []  # to retry while Redis is down
        self.fatal: str | None = None

    # -- the loop -------------------------------------------------------------------

    def run(self) -> int:
        """Supervise until every child has stopped; returns the exit code."""
        previous = self._install_signal_handlers()
        try:
            logger.info("supervisor %s (pid %d): starting %d worker processes (%s start "
                        "method)", self.options.name, os.getpid(), self.options.processes,
                        START_METHOD)
            for slot in range(self.options.processes):
                self._start(slot)
            while self.children:
                self._step()
        finally:
            self._kill_all()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        if self.fatal is not None:
            raise ChildrenFailing(self.fatal)
        if self.unclean:
            logger.error("supervisor %s: stopped; not every child drained: %s",
                         self.options.name, "; ".join(self.unclean))
            return 1
        logger.info("supervisor %s: every child drained; stopped", self.options.name)
        return 0

    def _step(self) -> None:
        objects: list[Any] = [child.process.sentinel for child in self.children]
        objects += [child.conn for child in self.children if child.conn is not None]
        for ready in wait(objects, TICK_SECONDS):
            child = self._owner(ready)
            if child is None:
                continue
            if ready is child.conn:
                self._read(child)
            else:
                self._ended(child)
        self._handle_signals()
        self._retry_handbacks()
        self._roll_next()

    def _owner(self, ready: Any) -> Child | None:
        for child in self.children:
            if ready is child.conn or ready == child.process.sentinel:
                return child
        return None

    # -- starting -------------------------------------------------------------------

    def _start(self, slot: int, replaces: Child | None = None) -> Child:
        generation = self.generations[slot]
        self.generations[slot] += 1
        consumer = f"{self.options.name}-{slot}.{generation}"
        ours, theirs = self.context.Pipe()
        spec = self._spec(slot, consumer)
        process = self.context.Process(target=child_boot.main, args=(spec, theirs),
                                       name=f"taskrunner-{slot}.{generation}")
        process.start()
        theirs.close()  # the child holds its end: the pipe closes when either dies
        child = Child(slot, generation, consumer, process, ours, replaces=replaces,
                      pid=process.pid or 0)
        self.children.append(child)
        role = ("stands for leader: scheduler and outbox flusher while it leads"
                if self._leads(slot) else "runs tasks")
        logger.info("started %s: %s", child.describe(), role)
        return child

    def _leads(self, slot: int) -> bool:
        return self.options.scheduler and slot == LEADER_SLOT

    def _spec(self, slot: int, consumer: str) -> dict[str, Any]:
        return {
            "consumer": consumer, "queues": list(self.options.queues),
            "worker": {**self.options.worker, "scheduler": self._leads(slot)},
            "log": self.options.log, "max_tasks": self.options.max_tasks,
            "max_memory_mb": self.options.max_memory_mb,
        }

    # -- what children say ----------------------------------------------------------

    def _read(self, child: Child) -> None:
        """Every report waiting on the child's pipe."""
        conn = child.conn
        assert conn is not None
        try:
            while conn.poll():
                self._report(child, decode_report(conn.recv_bytes()))
        except (EOFError, OSError):
            conn.close()
            child.conn = None

    def _report(self, child: Child, fields: list[str]) -> None:
        kind = fields[0]
        if kind == "s":
            shard, stream_id, at = fields[1], fields[2], float(fields[3])
            child.started[(shard, stream_id)] = Started(shard, stream_id, at)
        elif kind == "e":
            child.started.pop((fields[1], fields[2]), None)
        elif kind == "ready":
            self._ready(child, int(fields[2]))
        elif kind == "retire":
            self._retire(child, fields[1])
        elif kind == "stuck":  # settled by its watchdog already: `started` forgot it
            child.started[(fields[1], fields[2])] = Started(fields[1], fields[2],
                                                            float(fields[3]))
            self._end_stuck(child, (fields[1], fields[2]))
        elif kind == "terminate":
            child.started[(fields[1], fields[2])] = Started(fields[1], fields[2],
                                                            float(fields[3]))
            self._end_cancelled(child, (fields[1], fields[2]))

    def _ready(self, child: Child, resident: int) -> None:
        child.ready = True
        self.failures[child.slot] = 0
        if self.stopping:  # ready just as the stop began: it drains at once
            self._signal(child, signal.SIGTERM)
            return
        logger.info("%s is ready (%.0f MB, started in %.2fs)", child.describe(),
                    resident / 2**20, clock.monotonic() - child.born)
        old = child.replaces
        if old is not None and old in self.children:
            logger.info("%s: its replacement is ready; it drains and stops", old.describe())
            self._signal(old, signal.SIGTERM)

    def _retire(self, child: Child, why: str) -> None:
        if child.retiring or self.stopping:
            return
        child.retiring = True
        logger.info("%s %s: starting its replacement first", child.describe(), why)
        self._start(child.slot, replaces=child)

    def _end_stuck(self, child: Child, attempt: tuple[str, str]) -> None:
        child.stuck = attempt
        logger.error("%s: a task is stuck past its time limit and TIME_LIMIT_GRACE "
                     "(message %s of %s); ending the process", child.describe(),
                     attempt[1], attempt[0])
        self._signal(child, signal.SIGKILL)

    def _end_cancelled(self, child: Child, attempt: tuple[str, str]) -> None:
        if child.stuck is not None or child.cancelled is not None:
            return  # ending already, for another attempt: that one is settled
        child.cancelled = attempt
        logger.warning("%s: cancel(terminate=True) of the task of message %s of %s; ending "
                       "the process", child.describe(), attempt[1], attempt[0])
        self._signal(child, signal.SIGKILL)

    # -- a child ended --------------------------------------------------------------

    def _ended(self, child: Child) -> None:
        child.process.join(10)  # its sentinel is ready: it is ending, if not reaped yet
        if child.conn is not None:
            self._read(child)  # what it said just before it ended
        self.children.remove(child)
        code = child.process.exitcode
        cause = exit_cause(code)
        if child.aborted:
            logger.info("%s stopped before it was ready", child.describe())
        elif child.cancelled is not None:
            logger.info("%s ended for cancel(terminate=True) (%s)", child.describe(), cause)
        elif code != 0 or child.stuck is not None:
            logger.error("%s %s", child.describe(), cause)
        else:
            logger.info("%s stopped", child.describe())
        self._hand_back(child, cause, code)
        if self.stopping:
            if code != 0 and not child.aborted:
                self.unclean.append(f"{child.describe()} {cause}")
            return
        if not child.ready:
            self._failed_start(child, cause)
        if self.fatal is None and self._needs_replacement(child, code):
            self._start(child.slot, replaces=child.replaces)

    def _needs_replacement(self, child: Child, code: int | None) -> bool:
        if any(other.replaces is child for other in self.children):
            return False  # it was retiring: its replacement runs already
        if child.retiring and code == 0:
            return False
        burst = bool(self.options.worker.get("burst"))
        return not (burst and code == 0)

    def _failed_start(self, child: Child, cause: str) -> None:
        self.failures[child.slot] += 1
        if self.failures[child.slot] >= MAX_STARTUP_FAILURES:
            self.fatal = (f"worker process {child.slot} died before it was ready "
                          f"{self.failures[child.slot]} times in a row (last: {cause}); "
                          f"see its errors above")
            logger.error("supervisor %s: %s; stopping", self.options.name, self.fatal)
            self._stop(signal.SIGTERM)

    def _hand_back(self, child: Child, cause: str, code: int | None) -> None:
        """Its pending messages back on the queue; the running ones count an attempt,
        unless it drained (exit 0). A child ended for a stuck task: only that one counts;
        for a cancel(terminate=True): that one is recorded cancelled, no attempt counts."""
        ended_for = child.stuck or child.cancelled
        if ended_for is not None:
            kept = child.started.get(ended_for)
            child.started = {ended_for: kept} if kept is not None else {}
            cause = ("ended by its supervisor for cancel(id, terminate=True)"
                     if child.cancelled else f"ended by its supervisor, "
                     f"{self.options.time_limit_grace:g}s past its time limit")
        elif code == 0:
            child.started = {}
        started = clock.monotonic()
        adopters = self._adopters()
        try:
            done = hand_back(self.broker, child.consumer, self.options.queues, child.started,
                             cause, [adopter.consumer for adopter in adopters],
                             rerun_started=ended_for is None,
                             cancelled=child.cancelled is not None)
        except REDIS_DOWN as exc:
            logger.warning("cannot hand back the messages of %s yet (%s); retrying",
                           child.describe(), exc)
            self.handbacks.append((child, cause))
            return
        except Exception:
            logger.exception("could not hand back the messages of %s; they stay pending "
                             "for reclaim", child.describe())
            return
        for adopter in adopters:
            for stream, pairs in done.adopted.get(adopter.consumer, {}).items():
                self._tell(adopter, "adopt", stream, *(f"{sid}:{n}" for sid, n in pairs))
        if done.requeued or done.failed_attempts or done.adopted:
            logger.warning("%s: %s (%.0f ms)", child.describe(), done.describe(),
                           (clock.monotonic() - started) * 1000)

    def _adopters(self) -> list[Child]:
        """Live siblings that may take a dead child's fetched messages, least busy first
        (none while stopping: they would only put them back)."""
        if self.stopping:
            return []
        ready = [child for child in self.children
                 if child.ready and not child.retiring and child.conn is not None
                 and child.process.is_alive()]
        return sorted(ready, key=lambda child: len(child.started))

    def _tell(self, child: Child, *fields: object) -> None:
        """An order to a child; one that died meanwhile hands it all back itself."""
        try:
            if child.conn is not None:
                child.conn.send_bytes(encode_report(*fields))
        except OSError as exc:
            logger.warning("could not tell %s to %s (%s)", child.describe(), fields[0], exc)

    def _retry_handbacks(self) -> None:
        waiting, self.handbacks = self.handbacks, []
        for child, cause in waiting:
            self._hand_back(child, cause, None)

    # -- signals --------------------------------------------------------------------

    def _install_signal_handlers(self) -> dict[int, Any]:
        def on_signal(signum: int, frame: FrameType | None) -> None:
            self.signals.append(signum)

        return {signum: signal.signal(signum, on_signal)
                for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}

    def _handle_signals(self) -> None:
        while self.signals:
            signum = self.signals.pop(0)
            if signum == signal.SIGHUP:
                self._reload()
            else:
                self._stop(signum)

    def _stop(self, signum: int) -> None:
        if self.forced:
            return
        if self.stopping:
            self.forced = True
            logger.warning("supervisor %s: second signal; children stop waiting for their "
                           "running tasks", self.options.name)
        else:
            self.stopping = True
            self.rolling = []
            logger.info("supervisor %s: %s; every child drains", self.options.name,
                        signal.Signals(signum).name)
        for child in self.children:
            if child.conn is not None:
                self._read(child)  # is it ready (and so maybe holding messages) by now?
            if not child.ready:  # still importing: it holds nothing, nothing to drain
                child.aborted = True
                self._signal(child, signal.SIGKILL)
            elif self.forced:  # a second signal: stop waiting for running tasks
                self._signal(child, signal.SIGUSR1)
            elif not child.terminated:
                self._signal(child, signal.SIGTERM)

    def _reload(self) -> None:
        if self.stopping:
            return
        self.rolling = sorted({child.slot for child in self.children})
        logger.info("supervisor %s: SIGHUP; replacing the children one at a time with "
                    "freshly imported code", self.options.name)

    def _roll_next(self) -> None:
        """Start the next SIGHUP replacement once no other replacement is in flight."""
        if not self.rolling or self.stopping:
            return
        if any(child.retiring for child in self.children):
            return
        slot = self.rolling.pop(0)
        current = [child for child in self.children if child.slot == slot]
        if current:
            current[0].retiring = True
            self._start(slot, replaces=current[0])

    def _signal(self, child: Child, signum: int) -> None:
        if signum == signal.SIGTERM:
            child.terminated = True
        try:
            os.kill(child.pid, signum)
        except ProcessLookupError:
            pass

    def _kill_all(self) -> None:
        """Leaving on an error: no child may outlive the supervisor."""
        for child in self.children:
            self._signal(child, signal.SIGKILL)
            child.process.join(10)

