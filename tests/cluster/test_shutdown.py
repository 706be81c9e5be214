"""`tests.integration.test_shutdown`, run again on the Redis Cluster (see conftest.py)."""

from tests.integration.test_shutdown import *  # noqa: F403
