"""One `runtasks` process, assembled: the worker, and beside it the leader's part.

The worker (`worker/`) runs tasks; the leader's part (`scheduling/`) moves due delayed
tasks, fires periodic ones, flushes the outbox and writes the failed rows the database
refused. They are siblings and import neither each other: this module puts them side by
side and hands the worker what it calls (`Beside`), so arrows point down from here.

While a worker leads its consumer group (`scheduling/election.py`), `LeaderScheduler`
runs four threads: the `Scheduler`, the `OutboxFlusher`, the `FailedRowsFlusher` and the
`LostWorkerWatch` (a worker whose heartbeat is older than `WORKER_LOST_AFTER`: this worker
takes its messages, `worker/lost_workers.py`).
Burst mode runs no leader: the worker moves what is already due itself, through
`move_due`, before it decides that the queues are empty.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterable

from django_taskrunner.core import clock
from django_taskrunner.core.outbox import OutboxFlusher, flush_waiting
from django_taskrunner.scheduling.election import LeaderElection
from django_taskrunner.scheduling.periodic import PeriodicRunner
from django_taskrunner.scheduling.scheduler import Scheduler, promote_all_due, register_queues
from django_taskrunner.store.streams import Broker
from django_taskrunner.worker.failures import FailedRowsFlusher
from django_taskrunner.worker.lost_workers import LostWorkerWatch
from django_taskrunner.worker.reclaim import Adopter
from django_taskrunner.worker.settings import WorkerSettings
from django_taskrunner.worker.worker import Beside, Worker


def build_worker(broker: Broker, settings: WorkerSettings) -> Worker:
    """The worker of one `runtasks` process, with the leader's part beside it (unless
    `settings` says burst or no scheduler)."""
    queues = list(settings.queues)
    leader = (
        LeaderScheduler(broker, queues, lease=settings.leader_lease,
                        identity=f"{settings.consumer}:{secrets.token_hex(3)}")
        if settings.scheduler and not settings.burst else None
    )
    worker = Worker(broker, settings, Beside(
        leader=leader,
        register_queues=lambda: register_queues(broker, queues),
        move_due=lambda: _move_due(broker, queues),
    ))
    if leader is not None:
        leader.adopter = worker  # it takes lost workers' messages into its buffer
        leader.watch = worker.threads.watch  # a leader's thread that dies stops the worker
    return worker


def _move_due(broker: Broker, queues: list[str]) -> int:
    """Burst mode: move the due delayed tasks, then what waits in the outbox; how many.
    Raises when Redis is down before the outbox is tried (the worker retries)."""
    moved = promote_all_due(broker, queues, clock.now_ms())
    return moved + flush_waiting()  # tasks committed through the outbox and left there


class LeaderScheduler:
    """A worker's scheduling part: the election, and while it leads a `Scheduler`, the
    outbox flusher and the failed-rows flusher."""

    def __init__(self, broker: Broker, queues: Iterable[str], *, lease: float,
                 identity: str | None = None, adopter: Adopter | None = None) -> None:
        self.broker = broker
        self.adopter = adopter  # the worker that takes lost workers' messages
        self.queues = set(queues)
        self.election = LeaderElection(
            None, "", store=broker.store.leader, lease=lease,
            identity=identity, on_promote=self._start_scheduler, on_demote=self._stop_scheduler,
        )
        self.scheduler: Scheduler | None = None
        self.flusher: OutboxFlusher | None = None  # the outbox's, while leading
        self.rows: FailedRowsFlusher | None = None  # the failed rows kept in Redis
        self.lost: LostWorkerWatch | None = None  # hands back lost workers' messages
        # The worker's thread watch (`worker/monitor.py`): each thread started here is
        # handed to it, so one that dies takes the worker down rather than leaving a
        # worker that leads (or tries to) without scheduling anything.
        self.watch: Callable[[list[threading.Thread]], None] = lambda threads: None
        self._lock = threading.Lock()

    def start(self) -> None:
        self.election.start(watch=self.watch)

    def stop(self) -> None:
        """Stop scheduling and resign the lease, so another worker takes over at once."""
        self.election.stop()

    def _start_scheduler(self) -> None:
        with self._lock:
            if self.scheduler is None:
                self.scheduler = Scheduler(self.broker, self.queues,
                                           periodic=PeriodicRunner(self.broker))
                self.watch([self.scheduler])
                self.scheduler.start()
            if self.flusher is None:
                self.flusher = OutboxFlusher()
                self.watch([self.flusher])
                self.flusher.start()
            if self.rows is None:
                self.rows = FailedRowsFlusher()
                self.watch([self.rows])
                self.rows.start()
            if self.lost is None:
                self.lost = LostWorkerWatch(self.broker, self.queues, adopter=self.adopter)
                self.watch([self.lost])
                self.lost.start()

    def _stop_scheduler(self) -> None:
        with self._lock:
            scheduler, self.scheduler = self.scheduler, None
            flusher, self.flusher = self.flusher, None
            rows, self.rows = self.rows, None
            lost, self.lost = self.lost, None
        for thread in (lost, scheduler, flusher, rows):
            if thread is not None:
                thread.stop()
