"""`tests.integration.test_debounce`, run again on the Redis Cluster (see conftest.py)."""

from tests.integration.test_debounce import *  # noqa: F403
