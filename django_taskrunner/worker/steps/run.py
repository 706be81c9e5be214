"""`Run`: what the steps know of one delivery so far, filled in as it goes through them."""

from __future__ import annotations

from dataclasses import dataclass

from django_taskrunner.core.message import TaskMessage
from django_taskrunner.core.task import Task
from django_taskrunner.shim import shown_name
from django_taskrunner.store.limits import Slot
from django_taskrunner.worker.delivery import Delivery
from django_taskrunner.worker.running import Attempt


@dataclass(slots=True)
class Run:
    """One delivery on its way through the steps."""

    delivery: Delivery
    message: TaskMessage | None = None  # set by the decode step
    task: Task | None = None  # set by the lookup step
    attempt: Attempt | None = None  # set while and after the task function runs
    error: BaseException | None = None  # what the attempt raised (None: it succeeded)
    on_loop: bool = False  # an async attempt handed to the event loop, which settles it
    slots: tuple[Slot, ...] = ()  # concurrency slots taken (steps/limits.py)

    @property
    def shown_name(self) -> str:
        """The task name stats and metrics count this run under (`tasks.shown_name`: a
        Django Tasks framework task's own path, not the shim's)."""
        assert self.message is not None
        return shown_name(self.message.task_name, self.message.payload)

    @property
    def shard(self) -> str:
        return self.delivery.shard

    @property
    def stream_id(self) -> str:
        return self.delivery.stream_id
