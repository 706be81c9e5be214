"""The last-hour chart's geometry: stacked bars scaled to the busiest minute."""

from __future__ import annotations

import pytest

from django_taskrunner.models import Queue
from django_taskrunner.stats.figures import MinuteCounts
from tests.django.admin_helpers import page_module

_dashboard = page_module(Queue)  # the queues dashboard's page: it draws the chart
TOP, throughput_chart = _dashboard.TOP, _dashboard.throughput_chart


def minutes(*counts: tuple[int, int]) -> list[MinuteCounts]:
    return [MinuteCounts(start_ms=n * 60_000, succeeded=ok, failed=bad, retried=0)
            for n, (ok, bad) in enumerate(counts)]


def test_bars_stack_failed_on_succeeded_and_the_busiest_minute_fills_the_height():
    chart = throughput_chart(minutes((0, 0), (30, 10), (60, 0)), width=300, height=120)

    empty, mixed, busiest = chart.bars
    plot = chart.baseline - TOP
    assert (empty.done_height, empty.failed_height) == (0, 0)
    assert busiest.done_height == plot and busiest.done_y == TOP
    assert mixed.done_height == plot / 2
    assert mixed.failed_height == pytest.approx(plot / 6, abs=0.01)
    assert mixed.failed_y + mixed.failed_height == pytest.approx(mixed.done_y)  # on top
    assert (chart.peak, chart.finished, chart.failed) == (60, 100, 10)
    assert chart.peak_label == "60/min (1.00 tasks/s)"


def test_bars_sit_side_by_side_across_the_width():
    chart = throughput_chart(minutes(*[(1, 0)] * 60), width=600)
    assert [bar.x for bar in chart.bars[:3]] == [0.5, 10.5, 20.5]
    assert all(bar.width == 9 for bar in chart.bars)
    assert chart.bars[-1].x + chart.bars[-1].width <= 600


def test_an_idle_hour_draws_no_bar_and_tooltips_say_the_minute():
    chart = throughput_chart(minutes((0, 0), (0, 0)))
    assert chart.peak == 0 and all(bar.done_height == 0 for bar in chart.bars)
    assert chart.bars[1].title == "00:01: 0 succeeded, 0 failed, 0 retried (0.00 tasks/s)"
    assert (chart.start_label, chart.end_label) == ("00:00", "00:01")
