"""`tests.integration.test_delayed`, run again on the Redis Cluster (see conftest.py)."""

from tests.integration.test_delayed import *  # noqa: F403
