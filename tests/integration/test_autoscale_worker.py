"""An autoscaled worker against a real Redis: it grows under a burst, shrinks when idle.

Short intervals and cooldowns keep these fast; speed itself is measured in
bench/autoscale.py, not asserted here.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
from django.core.management import CommandError, call_command

from django_taskrunner import get_stats
from django_taskrunner.store import get_store
from django_taskrunner.worker.pool import ScalingPolicy
from tests.testapp.tasks import sleep_20ms
from tests.worker_helpers import new_worker

pytestmark = pytest.mark.django_db(transaction=True)

SLEEP_20 = "tests.testapp.tasks.sleep_20ms"


def changes(caplog, word: str) -> list[str]:
    return [record.getMessage() for record in caplog.records
            if record.name == "django_taskrunner.worker.monitor"
            and f"pool {word}" in record.getMessage()]


def test_a_burst_grows_the_pool_and_an_idle_queue_shrinks_it_back_to_one(
        taskrunner_settings, caplog):
    caplog.set_level(logging.INFO, logger="django_taskrunner")
    taskrunner_settings(STATS_INTERVAL=0.1)
    sleep_20ms.dispatch_many({"n": n} for n in range(300))  # 6 s of work for one thread
    broker = get_store().streams
    policy = ScalingPolicy(min_workers=1, max_workers=8, desired_wait=0.2, tolerance=0.1,
                           cooldown=0.3)
    worker = new_worker(["default"], concurrency=1, batch_size=10, block_ms=100,
                        shutdown_timeout=10, scaling=policy)
    thread = threading.Thread(target=worker.run)
    thread.start()
    sizes, reported = [], []
    try:
        deadline = time.monotonic() + 30
        while worker.pool.size == 0 and time.monotonic() < deadline:  # run() not there yet
            time.sleep(0.005)
        while time.monotonic() < deadline:
            sizes.append(worker.pool.size)
            reported.append(get_stats("default", tasks=False).threads)
            drained = broker.length("default") == 0
            if drained and max(sizes) > 1 and worker.pool.size == 1:
                break
            time.sleep(0.05)
        final_size = worker.pool.size
    finally:
        worker.request_stop()
        thread.join(20)

    # It grew beyond one thread, within its bounds, and its heartbeat said so
    assert 1 < max(sizes) <= 8
    assert min(sizes) >= 1
    assert max(reported) > 1
    # Once idle it went back to one thread
    assert final_size == 1
    # Every task ran exactly once: no shrink interrupted (and so repeated) a task
    stats = get_stats("default")
    assert stats.succeeded == 300
    assert {task.name: task.runs for task in stats.tasks} == {SLEEP_20: 300}
    # Each change was logged with the figures behind it
    grows, shrinks = changes(caplog, "grows"), changes(caplog, "shrinks")
    assert grows and shrinks
    assert "from 1 to" in grows[0]
    assert "predicted_wait=" in grows[0] and "length=" in grows[0] and "average=" in grows[0]
    assert shrinks[-1].split(" threads")[0].endswith("to 1")


def test_runtasks_min_and_max_workers_autoscale_a_burst(taskrunner_settings, run_burst, caplog):
    caplog.set_level(logging.INFO, logger="django_taskrunner")
    taskrunner_settings(STATS_INTERVAL=0.1, TUNING_COOLDOWN=0.2)
    sleep_20ms.dispatch_many({"n": n} for n in range(200))

    run_burst("--queue", "default", "--min-workers", "1", "--max-workers", "16")

    grows = changes(caplog, "grows")
    assert grows, "the pool never grew"
    sizes = [int(message.split(" to ")[1].split()[0]) for message in grows]
    assert all(1 < size <= 16 for size in sizes)
    assert get_stats("default").succeeded == 200


def test_concurrency_is_a_fixed_pool_that_never_changes(taskrunner_settings, run_burst, caplog):
    caplog.set_level(logging.INFO, logger="django_taskrunner")
    taskrunner_settings(STATS_INTERVAL=0.1, TUNING_COOLDOWN=0, MIN_WORKERS=1)
    sleep_20ms.dispatch_many({"n": n} for n in range(60))

    run_burst("--queue", "default", "--concurrency", "1")

    assert changes(caplog, "grows") == [] and changes(caplog, "shrinks") == []
    assert get_stats("default").succeeded == 60


@pytest.mark.parametrize("args, words", [
    (("--concurrency", "2", "--min-workers", "1"), "not both"),
    (("--min-workers", "9", "--max-workers", "4"), "larger than the largest"),
    (("--min-workers", "0"), "at least 1"),
])
def test_runtasks_refuses_pool_options_that_contradict(args, words):
    with pytest.raises(CommandError, match=words):
        call_command("runtasks", "--burst", *args)


def test_the_monitor_changes_the_pool_at_most_once_per_cooldown_on_its_clock():
    # Given a worker's monitor driven by a clock the test moves by hand
    now = [1000.0]
    policy = ScalingPolicy(min_workers=1, max_workers=8, desired_wait=1.0, tolerance=0.5,
                           cooldown=30.0)
    worker = new_worker(["default"], concurrency=1, batch_size=10, block_ms=100,
                        shutdown_timeout=1, scaling=policy)
    worker.monitor.now = lambda: now[0]
    worker.pool.resize(1)
    long, idle = figures_with_wait(12.0), figures_with_wait(0.0)
    try:
        # A long queue grows the pool at once
        assert worker.monitor.tune([long]) == 8
        # Within the cooldown nothing changes, whatever the figures say
        now[0] += 29.9
        assert worker.monitor.tune([idle]) is None
        assert worker.pool.size == 8
        # After it, an idle queue brings it back to the minimum
        now[0] += 0.1
        assert worker.monitor.tune([idle]) == 1
        assert worker.pool.size == 1
    finally:
        worker.pool.join(5)


def figures_with_wait(wait: float):
    from django_taskrunner.stats.figures import QueueStats

    return QueueStats(queue="default", length=int(wait * 10), waiting=0, pending=0,
                      oldest_wait=None, workers=1, threads=1, busy=1, average=0.1, p95=0.1,
                      throughput=1.0, runs=1, succeeded=1, retried=0, failed=0,
                      predicted_wait=wait)
