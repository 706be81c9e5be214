"""LONG_QUEUE_HOOK: tell someone when a queue's predicted wait passes LONG_QUEUE_THRESHOLD.

Every worker checks the figures it reads, but the hook fires at most once per
LONG_QUEUE_COOLDOWN for a queue across the whole site: the worker that sets the queue's
gate key (SET NX PX cooldown) calls it; the others see the gate and stay quiet. The hook
runs in a thread of its own, so a slow one (an HTTP call to a pager) never delays the
worker, and whatever it raises is logged, never raised into the worker.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from django.utils.module_loading import import_string

from django_taskrunner.stats.figures import QueueStats
from django_taskrunner.store.stats import StatsStore

logger = logging.getLogger(__name__)


class LongQueueHook:
    """Calls `hook(stats)` for queues whose predicted wait is above `threshold` seconds."""

    def __init__(
        self, hook: str | Callable[[QueueStats], Any], *, threshold: float, cooldown: float,
        gates: StatsStore, holder: str = "",
    ) -> None:
        self.hook = hook
        self.threshold = threshold
        self.cooldown_ms = max(1, round(cooldown * 1000))
        self.gates = gates  # the queues' gate keys (SET NX PX)
        self.holder = holder or "worker"

    def check(self, figures: Iterable[QueueStats]) -> list[threading.Thread]:
        """Fire the hook for every queue that is too long and not cooling down.

        Returns the threads started (tests join them).
        """
        started = []
        for stats in figures:
            if stats.predicted_wait is None or stats.predicted_wait <= self.threshold:
                continue
            if not self.gates.open_gate(stats.queue, self.holder, self.cooldown_ms):
                continue  # fired (here or by another worker) less than a cooldown ago
            logger.warning("queue %s is long: predicted wait %.1fs > LONG_QUEUE_THRESHOLD "
                           "%.1fs (length=%d, average=%s, threads=%d); calling the hook",
                           stats.queue, stats.predicted_wait, self.threshold, stats.length,
                           _seconds(stats.average), stats.threads)
            thread = threading.Thread(target=self._call, args=(stats,), daemon=True,
                                      name=f"taskrunner-long-queue-{stats.queue}")
            thread.start()
            started.append(thread)
        return started

    def _call(self, stats: QueueStats) -> None:
        try:
            hook = import_string(self.hook) if isinstance(self.hook, str) else self.hook
            hook(stats)
        except Exception:
            logger.exception("LONG_QUEUE_HOOK %s raised for queue %s", self.hook, stats.queue)


def _seconds(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.3f}s"
