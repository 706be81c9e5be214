"""`tests.integration.test_task_id`, run again on the Redis Cluster (see conftest.py)."""

from tests.integration.test_task_id import *  # noqa: F403
