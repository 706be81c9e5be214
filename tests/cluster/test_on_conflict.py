"""`tests.integration.test_on_conflict`, run again on the Redis Cluster (see conftest.py)."""

from tests.integration.test_on_conflict import *  # noqa: F403
