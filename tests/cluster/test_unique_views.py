"""`tests.django.test_unique_views`, run again on the Redis Cluster (see conftest.py)."""

from tests.django.test_unique_views import *  # noqa: F403
