"""The read size: BATCH_SIZE, grown to about PREFETCH_MS of work while tasks are short."""

from __future__ import annotations

from django_taskrunner.worker.fetcher import PREFETCH_BYTES, PREFETCH_MAX, SAMPLE_S, Prefetch


def drain(prefetch: Prefetch, per_second: float, seconds: float, step: float = 0.02,
          start: tuple[float, int] = (0.0, 0)) -> tuple[float, int]:
    """Feed `prefetch` a pool finishing `per_second` tasks for `seconds`; (time, count)."""
    now, completed = start
    for _ in range(round(seconds / step)):
        now += step
        completed += round(per_second * step)
        prefetch.update(completed, now)
    return now, completed


def test_a_new_worker_reads_its_batch_size():
    prefetch = Prefetch(batch_size=10, prefetch_ms=20)
    assert prefetch.size == 10
    assert prefetch.update(0, 100.0) == 10  # the first sample only starts the count


def test_short_tasks_grow_the_read_to_the_work_of_the_window_at_most_the_cap():
    prefetch = Prefetch(batch_size=10, prefetch_ms=20)
    at = drain(prefetch, per_second=2_000, seconds=0.5)
    assert prefetch.size == 40  # 2,000 tasks/s for 20 ms
    drain(prefetch, per_second=50_000, seconds=0.5, start=at)
    assert prefetch.size == PREFETCH_MAX


def test_long_tasks_keep_the_batch_size():
    prefetch = Prefetch(batch_size=10, prefetch_ms=20)
    drain(prefetch, per_second=8, seconds=5, step=0.5)  # 8 threads on 1 s tasks
    assert prefetch.size == 10


def test_the_read_shrinks_back_within_a_few_samples_once_tasks_slow_down():
    prefetch = Prefetch(batch_size=10, prefetch_ms=20)
    at = drain(prefetch, per_second=50_000, seconds=0.5)
    assert prefetch.size == PREFETCH_MAX
    drain(prefetch, per_second=0, seconds=0.2, start=at)  # ten samples of nothing finishing
    assert prefetch.size == 10


def test_samples_closer_than_the_sample_gap_change_nothing():
    prefetch = Prefetch(batch_size=10, prefetch_ms=20)
    prefetch.update(0, 1.0)
    assert prefetch.update(10_000, 1.0 + SAMPLE_S / 2) == 10
    assert prefetch.rate == 0.0


def test_zero_prefetch_keeps_every_read_at_the_batch_size():
    prefetch = Prefetch(batch_size=3, prefetch_ms=0)
    drain(prefetch, per_second=50_000, seconds=0.5)
    assert prefetch.size == 3


def test_a_batch_size_above_the_cap_is_kept():
    prefetch = Prefetch(batch_size=500, prefetch_ms=20)
    drain(prefetch, per_second=50_000, seconds=0.5)
    assert prefetch.size == 500


def test_large_messages_bound_the_read_by_bytes():
    prefetch = Prefetch(batch_size=10, prefetch_ms=20)
    prefetch.read(10, 10 * 1024 * 1024)  # 1 MB messages
    drain(prefetch, per_second=50_000, seconds=0.5)
    assert prefetch.size == PREFETCH_BYTES // (1024 * 1024)  # 16, not 100
    prefetch.read(10, 10 * 4 * 1024 * 1024)  # 4 MB ones now: the smoothed size grows
    drain(prefetch, per_second=50_000, seconds=0.1, start=(1.0, 25_000))
    assert prefetch.size == 10  # never below BATCH_SIZE
