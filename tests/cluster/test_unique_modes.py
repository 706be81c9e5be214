"""`tests.integration.test_unique_modes`, run again on the Redis Cluster (see conftest.py)."""

from tests.integration.test_unique_modes import *  # noqa: F403
