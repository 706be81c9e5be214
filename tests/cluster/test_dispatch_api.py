"""`tests.django.test_dispatch_api`, run again on the Redis Cluster (see conftest.py)."""

from tests.django.test_dispatch_api import *  # noqa: F403
