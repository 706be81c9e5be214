"""A Redis that refuses writes for a while: a private redis-server at `maxmemory` with
`noeviction`, filled from outside for 10 s while 1,000 short tasks drain on a real
`runtasks` worker, then freed. The worker stops fetching and starting tasks while its
acks are refused, keeps what finished meanwhile and sends it once Redis takes writes
again: no task lost, none run twice, no false `WorkerLost`, every record final and
nothing pending soon after the memory is freed."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from tests.chaos import scenarios
from tests.chaos.harness import Chaos, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos, pytest.mark.slow]

TASKS = 1000
OUTAGE_S = 10.0
FILL_CHUNK = 256 * 1024  # bytes per filler key, up to the limit
TOP_UP_CHUNK = 1024  # then, what any room the worker's acks made is filled with
HEADROOM = 48 * 1024 * 1024  # maxmemory above what the server uses once the tasks are queued


@pytest.fixture
def chaos(tmp_path: Any, redis_url: str) -> Iterator[Chaos]:
    from django.db import connection

    with scenarios.chaos_site(tmp_path, redis_url, str(connection.settings_dict["NAME"]),
                              RESERVATION_TIMEOUT=3, DEAD_CONSUMER_TIMEOUT=2) as chaos:
        yield chaos


class Filler:
    """Fills the private server up to its maxmemory from outside, and frees it again."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.keys = 0
        self.refusals = 0

    def top_up(self, chunk: int) -> None:
        """Add filler keys of `chunk` bytes until the server answers OOM (again)."""
        while True:
            try:
                self.client.set(f"filler:{self.keys}", b"x" * chunk)
            except redis.exceptions.OutOfMemoryError:
                self.refusals += 1
                return
            self.keys += 1

    def free(self) -> None:
        for first in range(0, self.keys, 500):
            self.client.delete(*(f"filler:{n}" for n in range(first, min(first + 500,
                                                                          self.keys))))


def queue_settled() -> bool:
    from django_taskrunner.store import get_store

    broker = get_store().streams
    return broker.length("default") == 0 and broker.pending("default") == 0


def test_a_redis_refusing_writes_loses_nothing_and_runs_nothing_twice(chaos: Chaos) -> None:
    from django_taskrunner import lookup
    from django_taskrunner.store import get_store
    from tests.testapp.chaos_tasks import chaos_work

    # Given 1,000 tasks of 30 ms queued on a server with room for 48 MB more, one worker
    server = redis.Redis.from_url(chaos.broker.url)
    handles = [chaos_work.dispatch({"n": n, "sleep": 0.03}) for n in range(TASKS)]
    used = int(server.info("memory")["used_memory"])
    server.config_set("maxmemory-policy", "noeviction")
    server.config_set("maxmemory", used + HEADROOM)
    worker = chaos.spawn("oom", "-c", "4")
    wait_until(lambda: chaos.ran_count() >= 150, scenarios.TIMEOUT,
               f"150 tasks to run\n{chaos.log_tail()}")

    # When the server's memory is filled for 10 s (topped up as it frees any), then freed
    filler = Filler(chaos.broker.url)
    ran_before = chaos.ran_count()
    began = time.monotonic()
    with contextlib.ExitStack() as stack:
        stack.callback(filler.free)
        filler.top_up(FILL_CHUNK)
        while time.monotonic() - began < OUTAGE_S:
            filler.top_up(TOP_UP_CHUNK)
            time.sleep(0.01)
        ran_during = chaos.ran_count() - ran_before
    freed = time.monotonic()

    # Then within 30 s every task ran once, is final, and nothing is pending
    keys = {str(n) for n in range(TASKS)}
    wait_until(scenarios.all_ran(chaos, keys), 30, f"every task to run\n{chaos.log_tail()}")
    wait_until(queue_settled, 30, f"nothing pending\n{chaos.log_tail()}")
    drained_s = time.monotonic() - freed
    statuses = [lookup(handle.id).status for handle in handles]
    streams = get_store().streams
    left = (streams.length("default"), streams.pending("default"))
    result = scenarios.tally(scenarios.Result("redis-oom", TASKS), chaos, keys)
    log = worker.log.read_text(errors="replace")
    print(f"redis-oom tasks={TASKS} outage_s={OUTAGE_S:g} filler_keys={filler.keys} "
          f"ran_during_outage={ran_during} acker_refusals_logged="
          f"{log.count('while acking')} drained_s_after_free={drained_s:.1f} "
          f"lost={result.lost} duplicates={result.duplicates} failed_rows={result.failed_rows} "
          f"records={ {s: statuses.count(s) for s in sorted(set(statuses))} } "
          f"queued_after={left[0]} pending_after={left[1]}")
    assert filler.refusals > 0  # the server did refuse writes
    assert "Redis refuses writes" in log, chaos.log_tail()
    # The worker stopped starting tasks: only those running when the first ack was
    # refused finished during the 10 s (4 threads could have run 1,300 in that time;
    # before the fix all the queue left ran during the outage)
    assert ran_during < 200, ran_during
    assert (result.lost, result.duplicates, result.failed_rows) == (0, 0, 0), chaos.log_tail()
    assert statuses.count("succeeded") == TASKS, {s: statuses.count(s) for s in set(statuses)}
    assert worker.alive(), chaos.log_tail()
    assert set(chaos.stop_all().values()) <= {0}, chaos.log_tail()
