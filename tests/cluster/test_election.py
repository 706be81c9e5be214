"""`tests.integration.test_election`, run again on the Redis Cluster (see conftest.py)."""

from tests.integration.test_election import *  # noqa: F403
