"""The in-memory recorder the executor feeds: counts, histogram buckets, recent window."""

from __future__ import annotations

from django_taskrunner.stats.recorder import BUCKET_LABELS, RUN_TIME_BUCKETS, StatsRecorder
from tests.worker_helpers import set_app_clock


def test_attempts_and_outcomes_are_counted_per_queue_and_task():
    recorder = StatsRecorder(window=10)
    recorder.ran("default", "a", 0.05, None)
    recorder.succeeded("default", "a")
    recorder.ran("default", "a", 0.2, ValueError("x"))
    recorder.retried("default", "a")
    recorder.ran("other", "a", 0.001, ValueError("x"))
    recorder.failed("other", "a")

    batch = recorder.drain()

    first, second = batch[("default", "a")], batch[("other", "a")]
    assert (first.runs, first.errors, first.succeeded, first.retried, first.failed) == (
        2, 1, 1, 1, 0)
    assert first.run_us == 250_000
    assert list(first.samples) == [50_000, 200_000]
    assert (second.runs, second.errors, second.failed) == (1, 1, 1)
    assert recorder.drain() == {}


def test_a_run_time_lands_in_the_first_bucket_whose_bound_is_not_below_it():
    recorder = StatsRecorder()
    for seconds in (0.005, 0.0051, 0.05, 1000.0):
        recorder.ran("q", "t", seconds, None)
    buckets = recorder.drain()[("q", "t")].buckets
    counts = dict(zip(BUCKET_LABELS, buckets, strict=True))
    assert len(buckets) == len(RUN_TIME_BUCKETS) + 1
    assert counts["0.005"] == 1 and counts["0.01"] == 1 and counts["0.05"] == 1
    assert counts["+Inf"] == 1
    assert sum(buckets) == 4


def test_the_window_keeps_only_the_latest_run_times():
    recorder = StatsRecorder(window=3)
    for ms in range(1, 6):
        recorder.ran("q", "t", ms / 1000, None)
    assert list(recorder.drain()[("q", "t")].samples) == [3000, 4000, 5000]


def test_a_batch_put_back_after_a_failed_write_merges_with_newer_figures_in_order():
    recorder = StatsRecorder(window=3)
    recorder.ran("q", "t", 0.001, None)
    recorder.ran("q", "t", 0.002, None)
    batch = recorder.drain()
    recorder.ran("q", "t", 0.003, None)
    recorder.ran("q", "t", 0.004, None)

    recorder.restore(batch)

    merged = recorder.drain()[("q", "t")]
    assert merged.runs == 4
    assert merged.run_us == 10_000
    assert list(merged.samples) == [2000, 3000, 4000]  # oldest dropped, order kept


def test_a_pickup_delay_is_counted_from_the_stream_ids_milliseconds(monkeypatch):
    from django_taskrunner.stats.recorder import PICKUP_BUCKETS, PICKUP_LABELS

    set_app_clock(monkeypatch, now_ms=lambda: 1_000_000)
    recorder = StatsRecorder()
    recorder.picked_up("q", "t", "999700-0", None)  # added 300 ms ago
    recorder.picked_up("q", "t", "1000005-3", None)  # "later" than now: another clock
    recorder.picked_up("q", "t", "1-0", 2)  # reclaimed: not a pickup
    recorder.picked_up("q", "t", "not-an-id", None)  # ignored, never raises

    figures = recorder.drain()[("q", "t")]

    assert (figures.pickups, figures.pickup_us) == (2, 300_000)
    counts = dict(zip(PICKUP_LABELS, figures.pickup_buckets, strict=True))
    assert counts["0.005"] == 1 and counts["0.5"] == 1 and sum(counts.values()) == 2
    assert len(PICKUP_LABELS) == len(PICKUP_BUCKETS) + 1 and PICKUP_BUCKETS[-1] == 3600


def test_pickup_figures_are_folded_like_run_times():
    recorder = StatsRecorder()
    recorder.picked_up("q", "t", "0-1", None)
    batch = recorder.drain()
    recorder.picked_up("q", "t", "0-2", None)
    recorder.restore(batch)
    figures = recorder.drain()[("q", "t")]
    assert figures.pickups == 2 and sum(figures.pickup_buckets) == 2


def test_a_histogram_quantile_interpolates_inside_its_bucket():
    from django_taskrunner.stats.figures import histogram_quantile

    bounds = (1.0, 2.0, 4.0)
    assert histogram_quantile(bounds, (0, 0, 0, 0), 0.95) is None
    assert histogram_quantile(bounds, (10, 0, 0, 0), 0.5) == 0.5
    assert histogram_quantile(bounds, (0, 10, 10, 0), 0.75) == 3.0
    assert histogram_quantile(bounds, (0, 0, 0, 5), 0.95) == 4.0  # in +Inf: the top bound
