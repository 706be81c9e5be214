"""`tests.integration.test_stats`, run again on the Redis Cluster (see conftest.py)."""

from tests.integration.test_stats import *  # noqa: F403
