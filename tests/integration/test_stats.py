"""Statistics against a real Redis: known workloads give known figures."""

from __future__ import annotations

import socket

import pytest

from django_taskrunner import get_stats
from django_taskrunner.conf import get_settings
from django_taskrunner.core import clock
from django_taskrunner.stats import recorder as stats_writes
from django_taskrunner.stats.figures import minute_counts, percentile, predict_wait
from django_taskrunner.stats.recorder import PICKUP_LABELS, StatsRecorder
from django_taskrunner.store import Store, get_store, keys
from django_taskrunner.worker.executor import Executor
from django_taskrunner.worker.fetcher import Delivery
from tests.testapp.tasks import always_fails, noop, sleep_50ms, sleep_100ms

pytestmark = pytest.mark.django_db(transaction=True)

SLEEP_50, SLEEP_100 = "tests.testapp.tasks.sleep_50ms", "tests.testapp.tasks.sleep_100ms"


def by_name(stats):
    return {task.name: task for task in stats.tasks}


def beat(consumer: str, queues: list[str], threads: int, *, now_ms: int, ttl: float = 10.0):
    """Write a worker heartbeat the way a worker's monitor does."""
    broker = get_store().streams
    pipe = broker.client.pipeline(transaction=False)
    heartbeat = stats_writes.WorkerReport(consumer=consumer, queues=queues, threads=threads, busy=0,
                                      min_workers=None, max_workers=threads, started_ms=now_ms)
    stats_writes.write(pipe, broker.store.stats, {}, heartbeat, now_ms=now_ms, window=200, ttl=ttl)
    pipe.execute()


def test_tasks_sleeping_50_and_100_ms_show_those_run_times(run_burst, virtual_run_time):
    # Given 20 tasks sleeping 50 ms and 20 sleeping 100 ms
    sleep_50ms.dispatch_many({"n": n} for n in range(20))
    sleep_100ms.dispatch_many({"n": n} for n in range(20))

    # When a worker with 4 threads runs them
    run_burst("--queue", "default", "--concurrency", "4")

    # Then each task's average and p95 are its sleep, plus a little overhead
    stats = get_stats("default")
    tasks = by_name(stats)
    fast, slow = tasks[SLEEP_50], tasks[SLEEP_100]
    assert (fast.runs, fast.succeeded, fast.failed, slow.runs, slow.succeeded) == (
        20, 20, 0, 20, 20)
    assert 0.050 <= fast.average < 0.070
    assert 0.100 <= slow.average < 0.125
    # (not `average <= p95`: one slow run among 20, a thread kept off the GIL for a
    # millisecond, lifts the mean above the 19th of 20 samples)
    assert 0.050 <= fast.p95 < 0.090
    assert 0.100 <= slow.p95 < 0.150
    assert fast.overall_average == pytest.approx(fast.average)
    assert slow.run_seconds == pytest.approx(20 * slow.average)
    # The queue's average mixes both; it is their mean when they ran as often
    assert stats.average == pytest.approx((fast.average + slow.average) / 2)
    assert (stats.runs, stats.succeeded, stats.failed, stats.retried) == (40, 40, 0, 0)
    # Histogram: every 50 ms attempt in the (0.05, 0.1] bucket or just above
    assert sum(fast.buckets) == 20
    assert stats.length == stats.waiting == stats.pending == 0
    assert stats.predicted_wait == 0.0
    # The worker stopped: its heartbeat was withdrawn
    assert (stats.workers, stats.threads) == (0, 0)


def test_the_pickup_delay_is_the_wait_from_dispatch_to_start(run_burst, monkeypatch):
    # Given 4 tasks of 100 ms dispatched together, that wait 0.6 s for a worker: the app's
    # clock runs 0.6 s ahead of Redis's from now on (no sleep)
    sleep_100ms.dispatch_many({"n": n} for n in range(4))
    wall_ms = clock.now_ms
    monkeypatch.setattr(clock, "now_ms", lambda: wall_ms() + 600)

    # When a worker with one thread runs them one after the other
    run_burst("--queue", "default", "--concurrency", "1")

    # Then each one's wait is counted: at least 0.6 s, the last one 0.3 s more
    stats = get_stats("default")
    assert stats.pickups == 4 and sum(stats.pickup_buckets) == 4
    counts = dict(zip(PICKUP_LABELS, stats.pickup_buckets, strict=True))
    assert all(counts[label] == 0 for label in ("0.005", "0.01", "0.025", "0.05", "0.1",
                                                "0.25", "0.5"))
    assert stats.pickup_average >= 0.6 + (0.1 + 0.2 + 0.3) / 4
    assert stats.pickup_p95 >= 0.6
    assert by_name(stats)[SLEEP_100].pickup_average == pytest.approx(stats.pickup_average)


def test_retries_and_failures_are_counted_per_task_and_per_minute(run_burst, r):
    always_fails.dispatch({"n": 1})  # max_retry=2: three attempts, two retries, one failure
    noop.dispatch_many({"n": n} for n in range(5))
    r.xadd(get_store().streams.stream("default"), {"m": b"not json"})  # refused: failed, never ran

    run_burst("--queue", "default")

    stats = get_stats("default")
    tasks = by_name(stats)
    failing = tasks["tests.testapp.tasks.always_fails"]
    assert (failing.runs, failing.errors, failing.retried, failing.failed,
            failing.succeeded) == (3, 3, 2, 1, 0)
    assert tasks["tests.testapp.tasks.noop"].succeeded == 5
    assert tasks[""].failed == 1 and tasks[""].runs == 0
    assert (stats.succeeded, stats.failed, stats.retried) == (5, 2, 2)
    minutes = minute_counts("default", minutes=60)
    assert len(minutes) == 60
    assert sum(m.succeeded for m in minutes) == 5
    assert sum(m.failed for m in minutes) == 2
    assert sum(m.retried for m in minutes) == 2
    # Each minute's counts expire after two hours
    for minute in minutes:
        if minute.succeeded or minute.failed:
            key = keys.minute_key(get_settings().PREFIX, "default", minute.start_ms // 60_000)
            assert 0 < r.ttl(key) <= 2 * 3600
    # Throughput: 7 finished in the last minute
    assert 0 < stats.throughput <= 7 / 60 + 1e-9


def test_figures_reach_redis_only_when_flushed_in_one_batch(r):
    # Given an executor recording into a recorder nobody has flushed yet
    broker = get_store().streams
    recorder = StatsRecorder()
    acked: list[str] = []
    executor = Executor(broker, "c1", lambda queue, stream_id: acked.append(stream_id),
                        stats=recorder)
    noop.dispatch_many({"n": n} for n in range(50))
    broker.ensure_group("default")
    for stream_id, body in broker.read("default", "c1", 50, None):
        executor.handle(Delivery("default", stream_id, body))
    assert len(acked) == 50

    # Then nothing was written per task...
    assert r.hgetall(keys.stats_key(broker.prefix, "default")) == {}

    # ...until one pipeline writes all fifty
    pipe = broker.client.pipeline(transaction=False)
    heartbeat = stats_writes.WorkerReport(consumer="c1", queues=["default"], threads=1, busy=0,
                                      min_workers=None, max_workers=1, started_ms=0)
    stats_writes.write(pipe, broker.store.stats, recorder.drain(), heartbeat,
                      now_ms=broker.client.time()[0] * 1000, window=200, ttl=10)
    pipe.execute()
    assert get_stats("default").succeeded == 50
    assert len(r.lrange(keys.window_key(broker.prefix, "default"), 0, -1)) == 50


def test_the_window_keeps_the_latest_run_times_only(taskrunner_settings, run_burst, r):
    taskrunner_settings(STATS_WINDOW=10)
    noop.dispatch_many({"n": n} for n in range(30))

    run_burst("--queue", "default")

    prefix = get_settings().PREFIX
    assert r.llen(keys.window_key(prefix, "default")) == 10
    assert r.llen(keys.window_key(prefix, "default", "tests.testapp.tasks.noop")) == 10
    assert get_stats("default").runs == 30


def test_the_predicted_wait_is_length_times_average_over_live_threads(run_burst, r):
    # Given run times measured on the queue (50 ms each)
    sleep_50ms.dispatch_many({"n": n} for n in range(4))
    run_burst("--queue", "default", "--concurrency", "4")
    average = get_stats("default").average
    now_ms = get_store().client.time()[0] * 1000

    # And 40 tasks waiting, two live workers with 3 + 5 threads, one dead one with 100
    sleep_50ms.dispatch_many({"n": n} for n in range(40))
    beat("w1", ["default"], 3, now_ms=now_ms)
    beat("w2", ["default", "other"], 5, now_ms=now_ms)
    beat("dead", ["default"], 100, now_ms=now_ms - 60_000)

    stats = get_stats("default", tasks=False)

    assert (stats.length, stats.waiting, stats.pending) == (40, 40, 0)
    assert (stats.workers, stats.threads) == (2, 8)
    assert stats.predicted_wait == pytest.approx(40 * average / 8)
    assert stats.tasks == ()
    assert stats.oldest_wait is not None and stats.oldest_wait >= 0
    assert get_stats("other", tasks=False).threads == 5
    # A heartbeat key lives for its TTL only
    assert 0 < r.ttl(keys.worker_key(get_settings().PREFIX, "w1")) <= 10


def test_an_unknown_queue_has_empty_figures():
    stats = get_stats("never-used")
    assert (stats.length, stats.runs, stats.workers, stats.throughput) == (0, 0, 0, 0.0)
    assert stats.average is None and stats.p95 is None
    assert stats.predicted_wait == 0.0


def test_prediction_and_percentile_helpers():
    assert predict_wait(0, None, 0) == 0.0
    assert predict_wait(10, None, 4) is None  # no run time measured yet
    assert predict_wait(10, 0.5, 0) is None  # nobody consumes the queue
    assert predict_wait(10, 0.5, 4) == 1.25
    assert percentile([], 0.95) is None
    assert percentile([float(n) for n in range(1, 101)], 0.95) == 95.0
    assert percentile([3.0, 1.0, 2.0], 0.95) == 3.0


def test_figures_are_kept_while_redis_is_unreachable_and_written_once_it_is_back(redis_target):
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from django_taskrunner.runner import build_worker
    from django_taskrunner.worker.settings import worker_settings

    # Given a worker whose Redis cannot be reached
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead_port = sock.getsockname()[1]
    prefix = get_settings().PREFIX
    dead = redis.Redis(port=dead_port, socket_connect_timeout=0.2, socket_timeout=0.2,
                       retry=Retry(NoBackoff(), 0))
    worker = build_worker(Store(dead, prefix, "taskrunner").streams, worker_settings(
        ["default"], concurrency=1, batch_size=1, block_ms=100, shutdown_timeout=1))
    worker.monitor.recorder.ran("default", "t", 0.01, None)
    worker.monitor.recorder.succeeded("default", "t")

    # When it tries to write them, it fails without losing them
    assert worker.monitor.flush() is False

    # And when Redis is back they are written
    worker.broker = Store(redis_target.client(), prefix, "taskrunner").streams
    assert worker.monitor.flush() is True
    assert get_stats("default").succeeded == 1


def test_flush_writes_a_batch_and_the_heartbeat_as_write_does_in_one_round_trip(r):
    # Given a batch of two attempts of one task on a shard of "default", and a heartbeat
    broker = get_store().streams
    recorder = StatsRecorder()
    recorder.ran("default#1", "t.a", 0.02, None)
    recorder.succeeded("default#1", "t.a")
    recorder.ran("default", "t.a", 0.04, ValueError("x"))
    recorder.failed("default", "t.a")
    now_ms = broker.client.time()[0] * 1000
    heartbeat = stats_writes.WorkerReport(consumer="c1", queues=["default"], threads=2, busy=1,
                                      min_workers=None, max_workers=2, started_ms=now_ms)

    # When the monitor's call writes them
    stats_writes.flush_figures(broker.store.stats, recorder.drain(), heartbeat,
                      now_ms=now_ms, window=200, ttl=10)

    # Then the queue's figures add both shards up, and the worker counts as live
    stats = get_stats("default", now_ms=now_ms)
    assert (stats.runs, stats.succeeded, stats.failed, stats.workers, stats.threads) == (
        2, 1, 1, 1, 2)
    assert by_name(stats)["t.a"].errors == 1
    assert r.lrange(keys.window_key(broker.prefix, "default", "t.a"), 0, -1) == [
        b"40000", b"20000"]
    assert r.ttl(keys.worker_key(broker.prefix, "c1")) == 10
