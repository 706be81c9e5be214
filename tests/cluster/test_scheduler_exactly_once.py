"""`tests.integration.test_scheduler_exactly_once`, run again on the Redis Cluster
(see conftest.py)."""

from tests.integration.test_scheduler_exactly_once import *  # noqa: F403
