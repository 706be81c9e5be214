"""The long-task case in chaos form: 200 tasks with their own reservation timeouts of 1 to
5 seconds, each running 2 to 4 times its timeout without calling `ctx.heartbeat()`, on two
real `runtasks` workers with the default 300-second RESERVATION_TIMEOUT. Only the workers'
heartbeats keep them reserved: every task must start exactly once.

Each worker runs 50 threads, so about half the tasks wait in the stream or in a worker's
buffer while the others run: buffered messages must be held too.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.chaos import scenarios
from tests.chaos.harness import Chaos, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]

TASKS = 200
QUEUE = "leases"


def plan(n: int) -> tuple[int, int]:
    """Task `n`'s reservation timeout (1-5 s) and how many timeouts it runs (2-4)."""
    return 1 + n % 5, 2 + (n // 5) % 3


def dispatch_long_tasks() -> None:
    from tests.testapp.chaos_tasks import LEASED

    for timeout, leased in LEASED.items():
        leased.dispatch_many({"n": n, "sleep": timeout * plan(n)[1]}
                             for n in range(TASKS) if plan(n)[0] == timeout)


def queue_is_empty() -> bool:
    from django_taskrunner.store import get_store

    broker = get_store().streams
    return broker.length(QUEUE) == 0 and broker.pending(QUEUE) == 0


@pytest.fixture
def chaos(tmp_path: Any, redis_url: str) -> Iterator[Chaos]:
    from django.db import connection

    with contextlib.ExitStack() as stack:
        yield stack.enter_context(scenarios.chaos_site(
            tmp_path, redis_url, str(connection.settings_dict["NAME"]),
            RESERVATION_TIMEOUT=300))


def test_two_hundred_tasks_longer_than_their_own_timeouts_each_start_once(
    chaos: Chaos,
) -> None:
    # Given two live workers of 50 threads each on the queue
    workers = [chaos.spawn(name, "-Q", QUEUE, "-c", "50") for name in ("a", "b")]
    wait_until(lambda: "started" in "".join(w.log.read_text() for w in workers), 30,
               "both workers to start")

    # When 200 tasks run 2 to 4 times their own reservation timeout
    started = time.monotonic()
    dispatch_long_tasks()
    keys = {str(n) for n in range(TASKS)}
    wait_until(scenarios.all_ran(chaos, keys), scenarios.TIMEOUT,
               f"every long task to finish\n{chaos.log_tail()}")
    wall = time.monotonic() - started
    wait_until(queue_is_empty, 30, "the queue to empty")

    # Then each started exactly once, both workers ran some, and nothing failed
    starts = chaos.starts()
    twice = {key: count for key, count in starts.items() if count != 1}
    print(f"long-tasks tasks={TASKS} wall_s={wall:.1f} started_twice={len(twice)}")
    assert not twice, f"{twice}\n{chaos.log_tail()}"
    assert set(starts) == keys
    assert all(count == 1 for count in chaos.runs().values())
    assert len(set(chaos.started_by().values())) == 2
    assert scenarios.failed_rows() == 0
    assert set(chaos.stop_all().values()) <= {0}, chaos.log_tail()
