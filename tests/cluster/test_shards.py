"""`tests.integration.test_shards`, run again on the Redis Cluster (see conftest.py)."""

from tests.integration.test_shards import *  # noqa: F403
