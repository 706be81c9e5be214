"""Figures about queues and workers: recording, storing, reading, health, metrics.

`django_taskrunner.stats` was a module in the first release, and its documented
`get_stats` (with the names it returned) still imports from here, with a
`DeprecationWarning`: use `django_taskrunner.get_stats`. Looked up on access (PEP 562),
so importing the package imports none of its modules.
"""

from __future__ import annotations

from typing import Any

from django_taskrunner.old_paths import moved_name

# The first release's `django_taskrunner.stats` names, now in `stats/figures.py`.
OLD_NAMES = frozenset({"get_stats", "TaskStats", "QueueStats", "MinuteCounts",
                       "minute_counts", "known_queues", "predict_wait", "percentile"})


def __getattr__(name: str) -> Any:
    if name not in OLD_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return moved_name(__name__, name, "django_taskrunner.stats.figures")
