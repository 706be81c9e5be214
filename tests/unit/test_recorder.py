"""The in-memory recorder the executor feeds: counts, histogram buckets, recent window."""

from __future__ import annotations

from django_taskrunner.stats.recorder import BUCKET_LABELS, RUN_TIME_BUCKETS, StatsRecorder


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
