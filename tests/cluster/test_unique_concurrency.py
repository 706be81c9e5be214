"""`tests.integration.test_unique_concurrency`, run again on the Redis Cluster (see conftest.py)."""

from tests.integration.test_unique_concurrency import *  # noqa: F403
