"""`tests.integration.test_worker_runs_tasks`, run again on the Redis Cluster (see conftest.py)."""

from tests.integration.test_worker_runs_tasks import *  # noqa: F403
