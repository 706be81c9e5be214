"""The leader forgets known queues nobody uses any more.

Every queue a worker consumes (its heartbeat) or a dispatch uses is known, with the time
it was last seen (`keys.queues_seen_key`): the dashboard, the metrics and the leader's
promotions list them. A queue named by mistake (`runtasks -Q emials`) would stay listed
for ever; so the leader, every `CHECK_EVERY_MS`, forgets each queue not seen for
`QUEUE_FORGET_AFTER` seconds (a setting, a day by default; 0: never) whose streams and
delayed sets (every shard's) hold nothing. A queue that tasks or settings declare is
listed all the same: it is never only in Redis.
"""

from __future__ import annotations

import logging

from django_taskrunner.conf import get_settings
from django_taskrunner.core import sharding
from django_taskrunner.store.schedule import ScheduleStore

logger = logging.getLogger(__name__)

CHECK_EVERY_MS = 10 * 60 * 1000


def forget_after_ms() -> int:
    """How long a queue may go unseen before it is forgotten (`QUEUE_FORGET_AFTER`), in
    ms; 0: never."""
    return round(get_settings().QUEUE_FORGET_AFTER * 1000)


def forget_idle_queues(store: ScheduleStore, now_ms: int,
                       forget_after: int | None = None) -> list[str]:
    """Forget the known queues not seen since `now_ms - forget_after` (ms; None: the
    setting's) that hold no message; returns their names. A queue seen again meanwhile
    is kept (the script compares its score). With 0 nothing is forgotten."""
    window = forget_after_ms() if forget_after is None else forget_after
    if window <= 0:
        return []
    cutoff = now_ms - window
    forgotten = []
    for name, seen_ms in sorted(store.queue_sightings().items()):
        if seen_ms >= cutoff or store.holds_messages(sharding.shards(name)):
            continue
        if store.forget_queue(name, cutoff):
            forgotten.append(name)
    if forgotten:
        logger.info("forgot the queues %s: not seen for %.0f h, and empty",
                    ", ".join(forgotten), window / 3_600_000)
    return forgotten
