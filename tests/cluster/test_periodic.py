"""`tests.integration.test_periodic`, run again on the Redis Cluster (see conftest.py)."""

from tests.integration.test_periodic import *  # noqa: F403
