"""The geometry of the dashboard's "last hour" chart, drawn as inline SVG by the template:
no JavaScript, nothing loaded from elsewhere.

One bar per minute: its height is the tasks that finished in that minute, the failed
ones stacked in red on top of the succeeded ones. The scale is the busiest minute.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from django.utils import timezone

from django_taskrunner.stats.figures import MinuteCounts

WIDTH = 600
HEIGHT = 140
TOP = 22  # room for the scale label (16 px text)
BOTTOM = 22  # room for the time labels


@dataclass(frozen=True)
class Bar:
    """One minute: where its two stacked rectangles go, and its tooltip."""

    x: float
    width: float
    done_y: float
    done_height: float
    failed_y: float
    failed_height: float
    title: str


@dataclass(frozen=True)
class Chart:
    """What the template draws."""

    width: int
    height: int
    baseline: float
    bars: tuple[Bar, ...]
    peak: int  # finished tasks in the busiest minute
    start_label: str
    end_label: str
    finished: int
    failed: int

    @property
    def peak_label(self) -> str:
        return f"{self.peak}/min ({self.peak / 60:.2f} tasks/s)"


def _clock(start_ms: int) -> str:
    return f"{timezone.localtime(datetime.fromtimestamp(start_ms / 1000, tz=UTC)):%H:%M}"


def throughput_chart(minutes: Sequence[MinuteCounts], width: int = WIDTH,
                     height: int = HEIGHT) -> Chart:
    """Stacked bars of succeeded and failed tasks per minute, oldest on the left."""
    baseline = height - BOTTOM
    plot = baseline - TOP
    slot = width / max(1, len(minutes))
    peak = max((m.succeeded + m.failed for m in minutes), default=0)
    scale = plot / peak if peak else 0.0
    bars = []
    for index, minute in enumerate(minutes):
        done_height = minute.succeeded * scale
        failed_height = minute.failed * scale
        done_y = baseline - done_height
        finished = minute.succeeded + minute.failed
        bars.append(Bar(
            x=round(index * slot + 0.5, 2), width=round(max(1.0, slot - 1), 2),
            done_y=round(done_y, 2), done_height=round(done_height, 2),
            failed_y=round(done_y - failed_height, 2), failed_height=round(failed_height, 2),
            title=(f"{_clock(minute.start_ms)}: {minute.succeeded} succeeded, "
                   f"{minute.failed} failed, {minute.retried} retried "
                   f"({finished / 60:.2f} tasks/s)"),
        ))
    return Chart(
        width=width, height=height, baseline=baseline, bars=tuple(bars), peak=peak,
        start_label=_clock(minutes[0].start_ms) if minutes else "",
        end_label=_clock(minutes[-1].start_ms) if minutes else "",
        finished=sum(m.succeeded + m.failed for m in minutes),
        failed=sum(m.failed for m in minutes),
    )
