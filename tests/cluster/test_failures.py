"""`tests.integration.test_failures`, run again on the Redis Cluster (see conftest.py)."""

from tests.integration.test_failures import *  # noqa: F403
