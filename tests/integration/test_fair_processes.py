"""Fair queues across two worker processes: the turns are kept in Redis, so they are
global; a burst of one key does not starve another, and weights hold."""

from __future__ import annotations

import pytest

from django_taskrunner import dispatch_many, lookup
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
    """The turns are counted in the order the feed moved tasks onto the stream (their
    stream ids). Start order follows it only up to what one process holds while the
    other runs on: on a loaded machine a process paused for 40 ms lets the other start
    40 tasks of A in a row, although the turns gave them 3 for 1."""
    a_tasks = dispatch_many(fair_step, [{"k": "A"} for _ in range(900)])
    b_tasks = dispatch_many(fair_step, [{"k": "B"} for _ in range(200)])

    spawn_two(spawn_worker)

    wait_for(lambda: r.llen(fair_starts_key()) == 1100, timeout=180)
    fed = sorted((stream_order(lookup(m.id).stream_id), key)
                 for key, messages in (("A", a_tasks), ("B", b_tasks)) for m in messages)
    keys_fed = [key for _order, key in fed]
    both = keys_fed[:len(keys_fed) - keys_fed[::-1].index("B")]
    assert 3 * 0.95 <= both.count("A") / both.count("B") <= 3 * 1.05


def stream_order(stream_id: str | None) -> tuple[int, int]:
    """A stream id as a sortable pair (milliseconds, sequence)."""
    assert stream_id, "every task was moved onto the stream"
    ms, _dash, seq = stream_id.partition("-")
    return int(ms), int(seq)
