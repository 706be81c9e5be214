"""Fair queues across two worker processes: the turns are kept in Redis, so they are
global; a burst of one key does not starve another, and weights hold."""

from __future__ import annotations

import pytest

from django_taskrunner import dispatch_many
from tests.testapp.fair_tasks import FAIR_QUEUE, fair_starts_key, fair_step
from tests.worker_helpers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def starts_while_both_wait(r) -> list[str]:
    starts = [key.decode() for key in r.lrange(fair_starts_key(), 0, -1)]
    return starts[:len(starts) - starts[::-1].index("B")]


def spawn_two(spawn_worker) -> None:
    for name in ("one", "two"):
        spawn_worker("--queue", FAIR_QUEUE, "--concurrency", "1", "--batch-size", "1",
                     "--no-scheduler", "--consumer-name", name)


def test_two_processes_keep_one_burst_from_starving_another_key(r, spawn_worker):
    dispatch_many(fair_step, [{"k": "C"} for _ in range(10_000)])
    dispatch_many(fair_step, [{"k": "B"} for _ in range(100)])

    spawn_two(spawn_worker)

    wait_for(lambda: r.lrange(fair_starts_key(), 0, -1).count(b"B") == 100, timeout=180)
    assert starts_while_both_wait(r).count("C") < 250


def test_two_processes_keep_the_weights(r, spawn_worker):
    dispatch_many(fair_step, [{"k": "A"} for _ in range(900)])
    dispatch_many(fair_step, [{"k": "B"} for _ in range(200)])

    spawn_two(spawn_worker)

    wait_for(lambda: r.lrange(fair_starts_key(), 0, -1).count(b"B") == 200, timeout=180)
    both = starts_while_both_wait(r)
    assert 3 * 0.95 <= both.count("A") / both.count("B") <= 3 * 1.05
