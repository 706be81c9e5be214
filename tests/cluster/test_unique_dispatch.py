"""`tests.integration.test_unique_dispatch`, run again on the Redis Cluster (see conftest.py)."""

from tests.integration.test_unique_dispatch import *  # noqa: F403
