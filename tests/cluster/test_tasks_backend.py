"""`tests.django.test_tasks_backend`, run again on the Redis Cluster (see conftest.py)."""

from tests.django.test_tasks_backend import *  # noqa: F403
