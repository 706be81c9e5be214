"""A master dies (SIGKILL) while worker processes consume a split queue and the test
dispatches into it: its replica takes over, and the workers and the dispatcher carry on
by themselves. What the failover itself can lose (writes the dead master acknowledged
but had not yet sent to its replica) is printed, not asserted: see docs/cluster.md and
the failover figures of bench/cluster.py. Everything dispatched once the cluster is
whole again must run exactly once, and no worker may die.

This test has a cluster of its own (a short node timeout, and a node gets killed).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from django_taskrunner import RedisUnavailable, dispatch
from django_taskrunner.store import get_store, keys
from tests.cluster.local_cluster import LocalCluster, find_binaries
from tests.conftest import RedisTarget
from tests.integration.scheduling_helpers import wait_for
from tests.testapp.tasks import noop, runs_key

pytestmark = pytest.mark.django_db(transaction=True)

SETTINGS = {"SHARDS": {"hot": 3}, "SOCKET_TIMEOUT": 2, "CONNECT_TIMEOUT": 1}


@pytest.fixture
def own_cluster() -> Iterator[LocalCluster]:
    if find_binaries() is None:
        pytest.skip("Redis Cluster tests need redis-server and redis-cli")
    cluster = LocalCluster(masters=3, replicas=1, node_timeout_ms=1000).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def redis_target(own_cluster: LocalCluster) -> RedisTarget:
    return RedisTarget(nodes=tuple(own_cluster.nodes))


class Dispatcher(threading.Thread):
    """Dispatches `noop` tasks one after the other, noting which ones Redis accepted."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.accepted: list[tuple[float, int]] = []  # (monotonic time, n)
        self.refused = 0
        self.stop = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            try:
                dispatch(noop, {"n": n}, queue="hot")
            except RedisUnavailable:
                self.refused += 1
                time.sleep(0.05)
            else:
                self.accepted.append((time.monotonic(), n))
            n += 1
            time.sleep(0.002)


def runs(r: Any) -> dict[int, int]:
    return {int(k.decode().split(":", 1)[1]): int(v) for k, v in r.hgetall(runs_key()).items()
            if k.decode().startswith("noop:")}


def test_killing_a_master_mid_run_workers_and_dispatch_recover_by_themselves(
        r, own_cluster, taskrunner_settings, spawn_worker, capsys):
    taskrunner_settings(**SETTINGS)
    env = {"TASKRUNNER_TEST_SETTINGS": json.dumps(SETTINGS)}
    workers = [spawn_worker("--queue", "hot", "--concurrency", "4", **env) for _ in range(2)]
    dispatcher = Dispatcher()
    dispatcher.start()
    prefix = get_store().prefix
    # The victim holds one shard's stream but not the hash the tasks count their runs in.
    victim = next(port for port in (own_cluster.master_serving(keys.stream_key(prefix, f"hot#{i}"))
                                    for i in range(3))
                  if port != own_cluster.master_serving(runs_key()))
    try:
        wait_for(lambda: len(runs(r)) >= 200, 30)
        own_cluster.kill(victim)
        killed_at = time.monotonic()
        took = own_cluster.wait_failover(victim, 30)
        recovered_at = time.monotonic()
        wait_for(lambda: any(t > recovered_at + 1 for t, _n in dispatcher.accepted), 30)
    finally:
        dispatcher.stop.set()
        dispatcher.join(10)
    after = [n for t, n in dispatcher.accepted if t > recovered_at]
    wait_for(lambda: all(n in runs(r) for n in after), 30)

    counted = runs(r)
    accepted = [n for _t, n in dispatcher.accepted]
    lost = [n for n in accepted if n not in counted]
    twice = [n for n, count in counted.items() if count > 1]
    with capsys.disabled():
        print(f"\nfailover: replica promoted {took:.1f}s after the kill; {len(accepted)} "
              f"accepted, {dispatcher.refused} refused while it lasted, {len(lost)} lost, "
              f"{len(twice)} ran twice")
    assert all(worker.poll() is None for worker in workers), "a worker died"
    assert len(after) > 0 and all(counted[n] == 1 for n in after)
    assert killed_at < recovered_at
