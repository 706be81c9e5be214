"""LONG_QUEUE_HOOK fires when the predicted wait passes the threshold, once per cooldown."""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import replace

import pytest

from django_taskrunner.stats.figures import LongQueueHook, QueueStats
from django_taskrunner.store import get_store, keys
from tests.testapp.tasks import runs_key, sleep_50ms
from tests.worker_helpers import new_worker

pytestmark = pytest.mark.django_db(transaction=True)

RECORD = "tests.testapp.hooks.record_long_queue"
RAISING = "tests.testapp.hooks.raising_hook"


def figures(queue: str = "default", wait: float | None = 120.0) -> QueueStats:
    return QueueStats(
        queue=queue, length=1200, waiting=1200, pending=0, oldest_wait=3.0, workers=1,
        threads=2, busy=2, average=0.2, p95=0.3, throughput=10.0, runs=10, succeeded=10,
        retried=0, failed=0, predicted_wait=wait,
    )


def hook(path: str = RECORD, *, cooldown: float = 60.0, holder: str = "w1") -> LongQueueHook:
    broker = get_store().streams
    return LongQueueHook(path, threshold=60.0, cooldown=cooldown,
                         gates=broker.store.stats, holder=holder)


def calls(r, queue: str = "default", name: str = "hook") -> int:
    return int(r.hget(runs_key(), f"{name}:{queue}") or 0)


def check(long_queue: LongQueueHook, *stats: QueueStats) -> None:
    for thread in long_queue.check(stats):
        thread.join(5)


def test_the_hook_fires_once_per_cooldown_however_often_it_is_checked(r):
    long_queue = hook(cooldown=60)
    gate = keys.long_queue_gate_key(get_store().prefix, "default")

    for _ in range(10):
        check(long_queue, figures())
    assert calls(r) == 1
    assert 59_000 < r.pttl(gate) <= 60_000  # the cooldown is the gate key's TTL

    r.delete(gate)  # the cooldown passes: Redis expires the gate (no sleep to race with)
    for _ in range(10):
        check(long_queue, figures())
    assert calls(r) == 2


def test_two_workers_checking_the_same_queue_fire_it_once(r):
    first, second = hook(holder="w1"), hook(holder="w2")

    check(first, figures())
    check(second, figures())

    assert calls(r) == 1


def test_each_queue_has_its_own_cooldown_and_a_short_wait_fires_nothing(r):
    long_queue = hook()

    check(long_queue, figures("default"), figures("other"), figures("quiet", wait=59.0),
          figures("unknown", wait=None))

    assert (calls(r, "default"), calls(r, "other"), calls(r, "quiet"), calls(r, "unknown")) == (
        1, 1, 0, 0)


def test_the_hook_gets_the_figures(r):
    check(hook(), replace(figures(), length=4321))

    [sent] = r.lrange(f"{runs_key()}:hook-figures", 0, -1)
    assert json.loads(sent)["length"] == 4321
    assert json.loads(sent)["predicted_wait"] == 120.0


def test_an_exception_in_the_hook_is_logged_and_goes_no_further(r, caplog):
    caplog.set_level(logging.ERROR, logger="django_taskrunner")

    check(hook(RAISING), figures())

    assert calls(r, name="raising-hook") == 1
    assert any("LONG_QUEUE_HOOK" in record.getMessage() and record.exc_info
               for record in caplog.records)


def test_a_worker_with_a_long_queue_calls_the_hook_once_and_keeps_working(
        taskrunner_settings, r):
    # Given 20 tasks of 50 ms for one thread (1 s of work), a 0.5 s threshold
    taskrunner_settings(STATS_INTERVAL=0.1, LONG_QUEUE_HOOK=RAISING, LONG_QUEUE_THRESHOLD=0.5,
                        LONG_QUEUE_COOLDOWN=60)
    sleep_50ms.dispatch_many({"n": n} for n in range(20))
    worker = new_worker(
        ["default"], concurrency=1, batch_size=5, block_ms=100, shutdown_timeout=10, burst=True)

    # When it runs them all (its hook raising every time it is called)
    thread = threading.Thread(target=worker.run)
    thread.start()
    thread.join(30)

    # Then the hook fired once (the cooldown outlasts the run) and every task ran
    assert not thread.is_alive()
    assert calls(r, name="raising-hook") == 1
    assert get_store().streams.length("default") == 0
