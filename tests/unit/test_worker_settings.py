"""WorkerSettings: the runtasks option over TASKRUNNER over the defaults, merged once."""

from __future__ import annotations

import pytest

from django_taskrunner.conf import get_settings
from django_taskrunner.worker.settings import PoolSizeConflict, worker_settings


def test_without_options_every_value_is_the_merged_taskrunner_setting(taskrunner_settings):
    merged = get_settings()
    settings = worker_settings(["default"])
    assert (settings.batch_size, settings.block_ms) == (merged.BATCH_SIZE, merged.BLOCK_MS)
    assert settings.shutdown_timeout == merged.SHUTDOWN_TIMEOUT
    assert (settings.concurrency, settings.scaling) == (merged.MAX_WORKERS, None)
    assert settings.reservation_timeout == merged.RESERVATION_TIMEOUT
    assert settings.time_limit_grace == merged.TIME_LIMIT_GRACE
    assert settings.scheduler and not settings.burst


def test_taskrunner_overrides_the_defaults_and_an_option_overrides_both(taskrunner_settings):
    taskrunner_settings(BATCH_SIZE=50, SHUTDOWN_TIMEOUT=7, MAX_WORKERS=3)
    from_settings = worker_settings(["default"])
    assert (from_settings.batch_size, from_settings.shutdown_timeout) == (50, 7)
    assert from_settings.concurrency == 3
    given = worker_settings(["default"], batch_size=2, concurrency=5, shutdown_timeout=1)
    assert (given.batch_size, given.concurrency, given.shutdown_timeout) == (2, 5, 1)


def test_a_given_zero_or_false_is_kept_not_replaced_by_the_setting(taskrunner_settings):
    taskrunner_settings(TIME_LIMIT_GRACE=5)
    settings = worker_settings(["default"], time_limit_grace=0, shutdown_timeout=0,
                               scheduler=False)
    assert (settings.time_limit_grace, settings.shutdown_timeout) == (0, 0)
    assert settings.scheduler is False


def test_min_workers_makes_the_pool_autoscale_and_conflicts_with_concurrency(
    taskrunner_settings,
):
    taskrunner_settings(MIN_WORKERS=2, MAX_WORKERS=6)
    settings = worker_settings(["default"])
    assert settings.concurrency == 2
    assert settings.scaling is not None and settings.scaling.max_workers == 6
    with pytest.raises(PoolSizeConflict):
        worker_settings(["default"], concurrency=4, min_workers=1)


def test_queues_keep_their_order_without_duplicates_and_unknown_names_are_refused(
    taskrunner_settings,
):
    assert worker_settings(["b", "a", "b"]).queues == ("b", "a")
    with pytest.raises(TypeError):
        worker_settings(["default"], batchsize=3)
